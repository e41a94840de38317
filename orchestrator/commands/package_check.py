"""`goondan package check [DIR] [--json]`: check a package's source tree as a publisher would
before building and uploading it.

DIR (default `.`) holds pyproject.toml. It must declare the `goondan.packages` entry point
(bundles.packages), naming a module whose directory (under DIR or DIR/src) holds goondan.yaml;
that file's leading Package document must carry the entry point's name and the distribution's
version; every resource must validate (the bundle loader, as `validate` does); and every Tool,
Extension and Connector entry must import and define what the agent process needs. The imports
run in a throwaway process (`python -m agent_process.check`, as `validate --deep`), on a
temporary bundle that uses every resource of the package, with the package "installed" by the
metadata an installer would write (a *.dist-info in a temporary directory): nothing is
installed for real. Exit 0 with a summary, 1 with every coded error.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bundles.diagnostics import Diagnostic
from bundles.documents import SourceDoc, YamlFileError, load_file
from bundles.kinds import Kind
from bundles.loader import MAIN_FILES, inspect_bundle
from bundles.naming import package_name_problem
from bundles.packages.installed import ENTRY_POINT_GROUP
from orchestrator.deepcheck import TIMEOUT
from orchestrator.exitcodes import EXIT_OK, EXIT_RUNTIME
from protocol.errors import ErrorCode

_INVALID = ErrorCode.E_PACKAGE_INVALID
_USED_KINDS = (Kind.TOOL, Kind.EXTENSION, Kind.CONNECTOR)


@dataclass(slots=True)
class Project:
    """What pyproject.toml says of the distribution and its one goondan package."""

    root: Path
    distribution: str = "?"
    version: str | None = None
    name: str = ""
    module: str = ""
    directory: Path | None = None
    errors: list[Diagnostic] = field(default_factory=list)

    def error(self, message: str, path: str, fix: str) -> None:
        self.errors.append(Diagnostic(_INVALID, message, path, fix))


def configure(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    check = actions.add_parser(
        "check",
        help="check a package's source tree before building it (entry point, YAML, entries)",
        description="Check the goondan package in DIR (default .) as a publisher would before "
        "uploading: the goondan.packages entry point, its module's goondan.yaml (Package name "
        "and version equal to the entry point's and the distribution's), every resource, and "
        "every entry file's import. Exit 0 valid, 1 with every coded error.",
    )
    check.add_argument("directory", nargs="?", default=".", metavar="DIR")
    check.add_argument("--json", action="store_true", help="print the result as JSON")


def _read_pyproject(project: Project) -> dict[str, Any] | None:
    path = project.root / "pyproject.toml"
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        project.error("no pyproject.toml", str(path), "run `goondan package new` for a start")
    except (OSError, tomllib.TOMLDecodeError) as exc:
        project.error(f"pyproject.toml cannot be read: {exc}", str(path), "fix its TOML")
    return None


def read_project(root: Path) -> Project:
    project = Project(root)
    data = _read_pyproject(project)
    if data is None:
        return project
    meta = data.get("project") if isinstance(data.get("project"), dict) else {}
    assert isinstance(meta, dict)
    project.distribution = str(meta.get("name", "?"))
    version = meta.get("version")
    project.version = version if isinstance(version, str) else None
    entry_points = meta.get("entry-points") if isinstance(meta.get("entry-points"), dict) else {}
    assert isinstance(entry_points, dict)
    group = entry_points.get(ENTRY_POINT_GROUP)
    where = f'{root / "pyproject.toml"} [project.entry-points."{ENTRY_POINT_GROUP}"]'
    if not isinstance(group, dict) or len(group) != 1:
        found = "none" if not isinstance(group, dict) else f"{len(group)}"
        project.error(
            f"the distribution must declare one {ENTRY_POINT_GROUP} entry point ({found} found)",
            where,
            'add `"@scope/name" = "module"` under that table',
        )
        return project
    project.name, module = next(iter(group.items()))
    project.module = str(module)
    _locate(project, where)
    return project


def _locate(project: Project, where: str) -> None:
    problem = package_name_problem(project.name)
    if problem is not None:
        project.error(problem, where, "name the entry point like @scope/name")
        return
    parts = project.module.split(".")
    if not all(p.isidentifier() for p in parts):
        project.error(f"{project.module!r} is not a module name", where, "name a module")
        return
    for base in (project.root, project.root / "src"):
        directory = base.joinpath(*parts)
        if (directory / "__init__.py").is_file() or directory.is_dir():
            project.directory = directory
            break
    else:
        project.error(
            f"module {project.module!r} has no directory under {project.root} or its src/",
            where,
            "create the module directory or fix the entry point's value",
        )
        return
    if not any((project.directory / n).is_file() for n in MAIN_FILES):
        project.error(
            f"no {MAIN_FILES[0]} in {project.directory}",
            str(project.directory),
            "put the package's goondan.yaml (a Package document first) in the module directory",
        )
        project.directory = None


def _display(project: Project, file: Path) -> str:
    try:
        return file.relative_to(project.root).as_posix()
    except ValueError:
        return str(file)


def check_identity(project: Project) -> None:
    """The leading Package document carries the entry point's name and the dist's version."""
    assert project.directory is not None
    main = next(project.directory / n for n in MAIN_FILES if (project.directory / n).is_file())
    display = _display(project, main)
    try:
        docs = load_file(main, display, limit=1)
    except YamlFileError:
        return  # the resource check reports it with its line
    first = docs[0] if docs else None
    data = first.data if first is not None else None
    if first is None or not isinstance(data, dict) or data.get("kind") != Kind.PACKAGE.value:
        project.error(
            "the package's goondan.yaml does not start with a Package document",
            display,
            f'put `kind: Package` with metadata.name "{project.name}" first',
        )
        return
    src = SourceDoc(display, first)
    meta = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    spec = data.get("spec") if isinstance(data.get("spec"), dict) else {}
    assert isinstance(meta, dict)
    assert isinstance(spec, dict)
    if meta.get("name") != project.name:
        project.error(
            f"the Package document is named {meta.get('name')!r}, the entry point {project.name!r}",
            src.where(("metadata", "name")),
            "use one name for both",
        )
    version = spec.get("version")
    if project.version is not None and str(version) != project.version:
        project.error(
            f"the Package document's version is {version!r}, the distribution's "
            f"{project.version!r} (pyproject.toml [project] version)",
            src.where(("spec", "version")),
            "give both the same version",
        )


def check_resources(project: Project) -> list[tuple[str, str]]:
    """Every resource, validated as the loader does; (kind, name) of what has an entry."""
    assert project.directory is not None
    report = inspect_bundle(project.directory, require_swarm=False)
    prefix = _display(project, project.directory)
    for diag in report.errors:
        path = diag.path if diag.path.startswith("/") else f"{prefix}/{diag.path}"
        project.errors.append(Diagnostic(diag.code, diag.message, path, diag.suggestion))
    if report.bundle is None:
        return []
    return [
        (str(res.kind), res.name)
        for res in report.bundle.resources
        if res.package is None and res.kind in _USED_KINDS
    ]


def _bundle_docs(project: Project, used: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """A bundle that uses every Tool, Extension and Connector of the package (JSON is YAML)."""

    def ref(name: str, kind: str | None = None) -> dict[str, str]:
        return {"kind": kind, "name": name, "package": project.name} if kind else {
            "ref": name, "package": project.name}  # fmt: skip

    def doc(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": "goondan.ai/v1", "kind": kind, "metadata": {"name": name},
                "spec": spec}  # fmt: skip

    agent: dict[str, Any] = {"modelConfig": {"modelRef": "check"}}
    agent["tools"] = [ref(n) for k, n in used if k == Kind.TOOL]
    agent["extensions"] = [ref(n) for k, n in used if k == Kind.EXTENSION]
    docs = [
        doc("Package", "package-check", {"dependencies": {project.name: None}}),
        doc("Model", "check", {"provider": "scripted", "model": "check"}),
        doc("Agent", "check", agent),
        doc("Swarm", "package-check", {"entryAgent": "check", "agents": ["check"]}),
    ]
    docs += [
        doc("Connection", f"c{i}", {"connectorRef": ref(n, str(Kind.CONNECTOR))})
        for i, (k, n) in enumerate(used)
        if k == Kind.CONNECTOR
    ]
    return docs


def _install_metadata(site: Path, project: Project) -> None:
    """What an installer writes of the distribution: importlib.metadata finds the package."""
    stem = project.distribution.replace("-", "_")
    info = site / f"{stem}-{project.version or '0'}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project.distribution}\nVersion: {project.version or '0'}\n"
    )
    (info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\n{project.name} = {project.module}\n"
    )


def check_entries(project: Project, used: list[tuple[str, str]]) -> None:
    """Import every entry in a throwaway process, as `validate --deep` does."""
    assert project.directory is not None
    base = project.directory.parents[len(project.module.split(".")) - 1]
    with tempfile.TemporaryDirectory(prefix="goondan-package-check-") as tmp:
        site, bundle = Path(tmp) / "site", Path(tmp) / "bundle" / "goondan.yaml"
        _install_metadata(site, project)
        bundle.parent.mkdir()
        docs = _bundle_docs(project, used)
        bundle.write_text("---\n".join(json.dumps(d) + "\n" for d in docs))
        paths = [str(site), str(base), *filter(None, [os.environ.get("PYTHONPATH")])]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
        argv = [sys.executable, "-m", "agent_process.check", str(bundle)]
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=TIMEOUT, env=env, check=False
            )
            rows = json.loads(done.stdout.strip().splitlines()[-1])
        except (subprocess.TimeoutExpired, ValueError, IndexError):
            project.errors.append(
                Diagnostic(ErrorCode.E_CONFIG_ENTRY_CHECK, "importing the entries failed",
                           str(project.directory), "run its tests: an import hangs or crashes")
            )  # fmt: skip
            return
    for row in rows:
        project.errors.append(
            Diagnostic(ErrorCode(row["code"]), row["message"], _shorter(project, row["path"]),
                       row.get("suggestion"))
        )  # fmt: skip


def _shorter(project: Project, path: str) -> str:
    """The checker's `goondan.yaml:12` (relative to the package) -> `acme_x/goondan.yaml:12`."""
    assert project.directory is not None
    if os.path.isabs(path):
        return path
    return f"{_display(project, project.directory)}/{path}"


def check(root: Path) -> tuple[Project, list[tuple[str, str]]]:
    project = read_project(root)
    used: list[tuple[str, str]] = []
    if project.directory is not None:
        check_identity(project)
        named = not any(e.path.endswith("metadata.name") for e in project.errors)
        before = len(project.errors)
        used = check_resources(project)
        if named and len(project.errors) == before:  # the checker loads the same resources
            check_entries(project, used)
    return project, used


def run(args: argparse.Namespace) -> int:
    project, used = check(Path(args.directory))
    if args.json:
        print(json.dumps({
            "package": project.name or None, "distribution": project.distribution,
            "version": project.version, "module": project.module or None,
            "valid": not project.errors, "resources": [f"{k}/{n}" for k, n in used],
            "errors": [d.to_dict() for d in project.errors],
        }, indent=2, ensure_ascii=False))  # fmt: skip
    else:
        for diag in project.errors:
            print(diag, file=sys.stderr)
        if not project.errors:
            what = ", ".join(f"{k}/{n}" for k, n in used) or "no entries"
            print(f"package {project.name} {project.version} ({project.distribution}, module "
                  f"{project.module}) is ready to build: {what}")  # fmt: skip
    return EXIT_RUNTIME if project.errors else EXIT_OK
