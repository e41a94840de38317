"""`goondan package add SPEC [--bundle B] [--dry-run]`: install a goondan package and declare it.

SPEC is anything pip accepts (a name with a range, a local directory, a wheel file). It is
installed into the environment goondan runs in (`uv pip install --python <this python>` when
uv is on PATH, else `<this python> -m pip install`; the installers' own environment variables,
e.g. PIP_NO_INDEX or UV_OFFLINE, apply). The goondan packages that the install added or
changed (entry points of the group `goondan.packages`, bundles.packages) are then written into
the bundle's Package document as `"@scope/name": ">=X.Y,<X+1"` by a text edit that keeps
comments, order and the other documents (orchestrator.dependency_edit). A bundle without a
Package document is refused with E_PACKAGE_EDIT naming the document to add.
Exit 0 added, 1 the install or the edit failed, 2 usage.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from bundles.diagnostics import BundleError
from bundles.loader import find_main_file
from bundles.packages.installed import InstalledPackage, clear_cache, installed
from bundles.packages.requirements import compatible_range, distribution_for
from orchestrator.dependency_edit import EditError, add_dependency, write_atomically
from orchestrator.exitcodes import EXIT_OK, EXIT_RUNTIME, EXIT_USAGE
from protocol.errors import ErrorCode

_TAIL = 15
"""Lines of the installer's output shown when it fails."""


def configure(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    add = actions.add_parser(
        "add",
        help="install a goondan package and declare it in the bundle's Package document",
        description="Install SPEC (anything pip accepts: a name with a range, a directory, a "
        "wheel) into the environment goondan runs in, then write the goondan package(s) it "
        "provides into the bundle's spec.dependencies with a compatible range, keeping the "
        "file's comments and order.",
    )
    add.add_argument("spec", metavar="SPEC", help="what to install, e.g. 'acme-triage>=0.1'")
    add.add_argument("--bundle", metavar="B", default=".", help="the bundle (default: .)")
    add.add_argument(
        "--dry-run", action="store_true", help="print the install command and the edit only"
    )


def installer(spec: str) -> list[str]:
    uv = shutil.which("uv")
    if uv is not None:
        return [uv, "pip", "install", "--python", sys.executable, spec]
    return [sys.executable, "-m", "pip", "install", spec]


def _fail(code: ErrorCode, message: str) -> int:
    print(f"goondan package add: {code}: {message}", file=sys.stderr)
    return EXIT_RUNTIME


def _install(argv: list[str]) -> str | None:
    """None when it worked, else its exit and last lines."""
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode == 0:
        return None
    tail = (done.stdout + done.stderr).strip().splitlines()[-_TAIL:]
    return f"{shlex.join(argv)} exited {done.returncode}:\n" + "\n".join(tail)


def _snapshot() -> dict[str, tuple[str, str]]:
    clear_cache()
    importlib.invalidate_caches()
    return {n: (p.distribution, p.version) for n, p in installed().items()}


def _provided(spec: str, before: dict[str, tuple[str, str]]) -> list[InstalledPackage]:
    """The goondan packages of the distribution SPEC names (not those of its dependencies);
    when SPEC does not say (a URL, say), those the install added or changed."""
    from packaging.utils import canonicalize_name

    after = {n: p for n, p in installed().items() if p.problem is None}
    wanted = _distribution_of(spec)
    if wanted is not None:
        return [p for p in after.values() if canonicalize_name(p.distribution) == wanted]
    return [p for n, p in after.items() if before.get(n) != (p.distribution, p.version)]


def _distribution_of(spec: str) -> str | None:
    """The distribution SPEC names: a wheel file's first field, a directory's pyproject
    [project] name, or a requirement's name."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    path = Path(spec)
    if spec.endswith(".whl"):
        return canonicalize_name(path.name.split("-", 1)[0])
    if path.is_dir():
        try:
            with (path / "pyproject.toml").open("rb") as fh:
                name = tomllib.load(fh).get("project", {}).get("name")
        except (OSError, tomllib.TOMLDecodeError, AttributeError):
            return None
        return canonicalize_name(name) if isinstance(name, str) else None
    try:
        return canonicalize_name(Requirement(spec).name)
    except InvalidRequirement:
        return None


def _value(pkg: InstalledPackage) -> object:
    wanted = compatible_range(pkg.version)
    if distribution_for(pkg.name) != pkg.distribution.lower().replace("_", "-"):
        return {"version": wanted, "distribution": pkg.distribution}
    return wanted


def _edited(main: Path, packages: list[InstalledPackage]) -> str:
    text = main.read_text(encoding="utf-8")
    for pkg in sorted(packages, key=lambda p: p.name):
        text = add_dependency(text, pkg.name, _value(pkg))
    return text


def _diff(main: Path, old: str, new: str) -> None:
    before, after = old.splitlines(keepends=True), new.splitlines(keepends=True)
    sys.stdout.writelines(difflib.unified_diff(before, after, str(main), str(main)))


def _dry_run(spec: str, argv: list[str], main: Path, now: dict[str, tuple[str, str]]) -> int:
    """The command, and the edit when the distribution SPEC names is already installed (what
    an install would bring cannot be known without installing it)."""
    print(f"would run: {shlex.join(argv)}")
    packages = _provided(spec, now)
    if not packages:
        print(f"then add the goondan package(s) it provides to {main} spec.dependencies")
        return EXIT_OK
    old = main.read_text(encoding="utf-8")
    try:
        _diff(main, old, _edited(main, packages))
    except EditError as exc:
        return _fail(exc.code, f"{main}: {exc}")
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    try:
        main = find_main_file(Path(args.bundle))
    except BundleError:
        print(f"goondan package add: no bundle at {args.bundle}", file=sys.stderr)
        return EXIT_USAGE
    if args.spec.startswith("-"):  # pip would read it as an option (--index-url, -r FILE)
        print(f"goondan package add: SPEC {args.spec!r} must not start with '-'", file=sys.stderr)
        return EXIT_USAGE
    argv = installer(args.spec)
    before = _snapshot()
    if args.dry_run:
        return _dry_run(args.spec, argv, main, before)
    failure = _install(argv)
    if failure is not None:
        return _fail(ErrorCode.E_PACKAGE_INSTALL, failure)
    _snapshot()
    packages = _provided(args.spec, before)
    if not packages:
        return _fail(
            ErrorCode.E_PACKAGE_INSTALL,
            f"{args.spec} installed, but it provides no goondan package (no "
            "`goondan.packages` entry point naming a module with a goondan.yaml)",
        )
    old = main.read_text(encoding="utf-8")
    try:
        new = _edited(main, packages)
    except EditError as exc:
        return _fail(exc.code, f"{main}: {exc} (the package stays installed)")
    write_atomically(main, new)
    _diff(main, old, new)
    for pkg in packages:
        print(f"added {pkg.name} ({pkg.distribution} {pkg.version}) to {main}")
    return EXIT_OK
