"""`goondan package list [--json] [--bundle B]`: the goondan packages installed here.

A goondan package is a Python distribution that declares a `goondan.packages` entry point
(`bundles.packages`). `list` shows each one's distribution, version, directory, where it was
installed from, its resources, and what the bundle (`--bundle`, default ./goondan.yaml when it
exists) declares of it and uses. It reads files only: no daemon, no package code runs.
Exit 0 listed, 2 when the `--bundle` named does not exist.

The other actions live in their own modules, dispatched from here: `new` (package_new),
`check` (package_check), `add` (package_add), `lock` (package_lock).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bundles.documents import YamlFileError, load_file
from bundles.kinds import Kind, PackageRequirement
from bundles.loader import MAIN_FILES, BundleReport, bundle_files, inspect_bundle
from bundles.model import Bundle
from bundles.packages.installed import InstalledPackage, installed
from orchestrator.commands import package_add, package_check, package_lock, package_new
from orchestrator.commands.validate import used_resources
from orchestrator.exitcodes import EXIT_OK, EXIT_USAGE

_DESCRIPTION = """\
goondan packages are Python distributions: a distribution declares
  [project.entry-points."goondan.packages"]
  "@acme/github" = "acme_github"
and the module's directory holds the package's goondan.yaml (a Package document, then its
Tools, Extensions, Connectors, Models, Agents) and code. Install one with pip or uv into the
environment goondan runs in; a bundle lists it in its Package document,
  spec: {dependencies: {"@acme/github": ">=1.2,<2"}}
and references its resources as {kind: Tool, name: github, package: "@acme/github"}.
@goondan/base (the built-in tools) is always available.
"""


@dataclass(slots=True)
class Usage:
    """What the bundle declares of each package and which of its resources it uses."""

    path: str
    report: BundleReport
    declared: dict[str, str | None] = field(default_factory=dict)
    used: dict[str, list[str]] = field(default_factory=dict)


def _usage(path: Path) -> Usage:
    report = inspect_bundle(path)
    usage = Usage(str(report.bundle.path if report.bundle else path), report)
    if report.bundle is not None:
        usage.declared = _declared(report.bundle)
        for res in used_resources(report.bundle):
            if res.package is not None:
                usage.used.setdefault(res.package, []).append(f"{res.kind}/{res.name}")
    return usage


def _declared(bundle: Bundle) -> dict[str, str | None]:
    doc = bundle.package()
    if doc is None:
        return {}
    out: dict[str, str | None] = {}
    for name, value in doc.spec.dependencies.items():
        out[name] = value.version if isinstance(value, PackageRequirement) else value
    return out


def _resources(pkg: InstalledPackage) -> tuple[list[dict[str, str]], str | None]:
    """Kinds and names in the package's files, read without checking them (`validate`
    checks what a bundle uses), or why they cannot be read."""
    if pkg.directory is None:
        return [], pkg.problem
    main = next((pkg.directory / n for n in MAIN_FILES if (pkg.directory / n).is_file()), None)
    if main is None:
        return [], f"no {MAIN_FILES[0]} in {pkg.directory}"
    out: list[dict[str, str]] = []
    for file in bundle_files(main):
        try:
            docs = load_file(file, f"{pkg.name}/{file.name}")
        except YamlFileError as exc:
            return out, str(exc.diagnostic)
        out += [found for doc in docs if (found := _identity(doc.data)) is not None]
    return out, None


def _identity(data: object) -> dict[str, str] | None:
    if not isinstance(data, dict) or not isinstance(data.get("metadata"), dict):
        return None
    kind, name = data.get("kind"), data["metadata"].get("name")
    if isinstance(kind, str) and isinstance(name, str) and kind != Kind.PACKAGE:
        return {"kind": kind, "name": name}
    return None


def listing(usage: Usage | None) -> dict[str, Any]:
    packages = []
    for name, pkg in sorted(installed().items()):
        resources, problem = _resources(pkg)
        packages.append(
            {
                "name": name,
                "distribution": pkg.distribution,
                "version": pkg.version,
                "module": pkg.module,
                "location": str(pkg.directory) if pkg.directory else None,
                "source": pkg.source or "index",
                "problem": pkg.problem or problem,
                "resources": resources,
                "declared": usage is not None and name in usage.declared,
                "wanted": usage.declared.get(name) if usage else None,
                "used": usage.used.get(name, []) if usage else [],
            }
        )
    bundle = None
    if usage is not None:
        errors = [d.to_dict() for d in usage.report.errors]
        bundle = {"path": usage.path, "valid": usage.report.valid, "errors": errors}
    return {"packages": packages, "bundle": bundle}


def _render(data: dict[str, Any]) -> None:
    for pkg in data["packages"]:
        source = "" if pkg["source"] == "index" else f"  from {pkg['source']}"
        print(f"{pkg['name']}  {pkg['distribution']} {pkg['version']}  {pkg['location']}{source}")
        if pkg["problem"]:
            print(f"  unusable: {pkg['problem']}")
        by_kind: dict[str, list[str]] = {}
        for res in pkg["resources"]:
            by_kind.setdefault(res["kind"], []).append(res["name"])
        for kind, names in by_kind.items():
            print(f"  {kind}: {', '.join(names)}")
        if pkg["declared"]:
            print(f"  declared by the bundle: {pkg['wanted'] or 'any version'}")
        if pkg["used"]:
            print(f"  used by the bundle: {', '.join(pkg['used'])}")
    bundle = data["bundle"]
    if bundle is not None and not bundle["valid"]:
        print(
            f"{bundle['path']}: {len(bundle['errors'])} error(s); `goondan validate` lists them",
            file=sys.stderr,
        )


class _Package:
    name = "package"

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.description = _DESCRIPTION
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
        actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
        show = actions.add_parser(
            "list",
            help="installed goondan packages, their resources, and what the bundle uses",
            description="List the goondan packages installed in the environment goondan runs "
            "in: distribution, version, directory, where it was installed from, resources, and "
            "what the bundle declares of each and uses. Reads files only.",
        )
        show.add_argument("--json", action="store_true", help="print the list as JSON")
        show.add_argument(
            "--bundle",
            metavar="B",
            help="the bundle whose use is shown (default: ./goondan.yaml when it exists)",
        )
        package_new.configure(actions)
        package_check.configure(actions)
        package_add.configure(actions)
        package_lock.configure(actions)

    def run(self, args: argparse.Namespace) -> int:
        if args.action == "new":
            return package_new.run(args)
        if args.action == "check":
            return package_check.run(args)
        if args.action == "add":
            return package_add.run(args)
        if args.action == "lock":
            return package_lock.run(args)
        usage = None
        if args.bundle is not None:
            if not Path(args.bundle).exists():
                print(f"goondan package list: no bundle at {args.bundle}", file=sys.stderr)
                return EXIT_USAGE
            usage = _usage(Path(args.bundle))
        elif any(Path(n).is_file() for n in MAIN_FILES):
            usage = _usage(Path("."))
        data = listing(usage)
        if args.json:
            print(json.dumps(data, indent=2, ensure_ascii=False))
        else:
            _render(data)
        return EXIT_OK


COMMAND = _Package()
