"""Load a bundle: goondan.yaml plus its split files, the packages it uses, and the env files.

`load_bundle()` is the one entry point of the config plane. It reads every file, turns every
document into a typed `Resource`, runs every check in `bundles.validate`, and either returns
the `Bundle` or raises one `BundleError` carrying every problem found (fail fast, but all
errors at once). Nothing is imported or executed from the bundle while loading.

Packages are the installed ones (`bundles.packages`): `@goondan/base` and those the bundle's
Package document lists in `spec.dependencies`, and theirs in turn, each checked against the
version range its dependent wants.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bundles.convert import convert
from bundles.diagnostics import BundleError, Collector, Diagnostic, Severity, closest
from bundles.documents import SourceDoc, YamlFileError, load_file
from bundles.envfiles import load_env_files
from bundles.kinds import API_VERSION, BASE_PACKAGE, SPEC_TYPES, Kind, Metadata
from bundles.model import Bundle, Resource, SourceLocation
from bundles.naming import name_problem, package_name_problem
from bundles.packages.installed import InstalledPackage, installed
from bundles.packages.requirements import Requirement, check, distribution_for, requirements
from bundles.validate import Checks, Options, SourceMap
from protocol.errors import ErrorCode

MAIN_FILES = ("goondan.yaml", "goondan.yml")
SPLIT_STEMS = (
    "model", "models", "agent", "agents", "tool", "tools", "extension", "extensions",
    "connector", "connectors", "connection", "connections", "swarm", "swarms", "resources",
)  # fmt: skip
"""Files next to goondan.yaml that are read too (`.yaml` or `.yml`); other YAML is ignored."""

_ENVELOPE = ("apiVersion", "kind", "metadata", "spec")
_UNREADABLE = {
    ErrorCode.E_CONFIG_PARSE_ERROR,
    ErrorCode.E_CONFIG_FILE_TOO_LARGE,
    ErrorCode.E_CONFIG_TOO_MANY_DOCUMENTS,
    ErrorCode.E_CONFIG_NOT_FOUND,
}
"""A file with one of these errors was not read: references into it cannot be judged."""


@dataclass(slots=True)
class BundleReport:
    """What `inspect_bundle` found: the bundle (None if it has errors), errors and warnings."""

    bundle: Bundle | None
    errors: list[Diagnostic] = field(default_factory=list)
    warnings: list[Diagnostic] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.errors


def find_main_file(path: Path) -> Path:
    """`path` itself, or the goondan.yaml (.yml) inside a directory; BundleError if none."""
    if path.is_dir():
        for name in MAIN_FILES:
            if (path / name).is_file():
                return path / name
        missing = path / MAIN_FILES[0]
    elif path.is_file():
        return path
    else:
        missing = path
    raise BundleError(
        [
            Diagnostic(
                ErrorCode.E_CONFIG_NOT_FOUND,
                "bundle file not found",
                str(missing),
                "pass the path of a goondan.yaml (or its directory), or run `goondan init`",
            )
        ]
    )


def bundle_files(main: Path) -> list[Path]:
    """The main file first, then the recognised split files next to it, in a stable order."""
    files = [main]
    for stem in SPLIT_STEMS:
        for ext in (".yaml", ".yml"):
            candidate = main.parent / f"{stem}{ext}"
            if candidate.is_file() and candidate.resolve() != main.resolve():
                files.append(candidate)
    return files


def _display(file: Path, root: Path, prefix: str) -> str:
    try:
        rel = file.relative_to(root).as_posix()
    except ValueError:
        rel = str(file)
    return f"{prefix}/{rel}" if prefix else rel


def _read_documents(
    files: Sequence[Path], root: Path, prefix: str, collector: Collector
) -> list[tuple[Path, SourceDoc, int]]:
    """(file, source, position among its file's documents) for every document that parsed."""
    out: list[tuple[Path, SourceDoc, int]] = []
    for file in files:
        display = _display(file, root, prefix)
        try:
            docs = load_file(file, display)
        except YamlFileError as exc:
            collector.add(exc.diagnostic)
            continue
        out += [(file, SourceDoc(display, doc), pos) for pos, doc in enumerate(docs)]
    return out


def _kind_of(data: dict[Any, Any], src: SourceDoc, collector: Collector) -> Kind | None:
    ok = True
    for key in data:
        if key not in _ENVELOPE:
            ok = False
            collector.error(
                ErrorCode.E_CONFIG_SCHEMA_INVALID,
                f"unknown top-level field {key!r} (field {key})",
                src.where((key,)),
                "a resource has only apiVersion, kind, metadata and spec",
            )
    version = data.get("apiVersion")
    if version != API_VERSION:
        ok = False
        collector.error(
            ErrorCode.E_CONFIG_UNSUPPORTED_API_VERSION,
            f"apiVersion {version!r} is not supported" if version else "apiVersion is missing",
            src.where(("apiVersion",)),
            f"set apiVersion: {API_VERSION}",
        )
    raw_kind = data.get("kind")
    try:
        kind = Kind(str(raw_kind))
    except ValueError:
        near = closest(str(raw_kind), [k.value for k in Kind], limit=1)
        collector.error(
            ErrorCode.E_CONFIG_UNKNOWN_KIND,
            f"unknown kind {raw_kind!r}" if raw_kind else "kind is missing",
            src.where(("kind",)),
            f"did you mean {near[0]}?" if near else "kinds: " + ", ".join(k.value for k in Kind),
        )
        return None
    return kind if ok else None


def _resource(
    src: SourceDoc, file: Path, *, root: Path, collector: Collector
) -> Resource[Any] | None:
    data = src.doc.data
    if not isinstance(data, dict):
        collector.error(
            ErrorCode.E_CONFIG_SCHEMA_INVALID,
            f"a document must be a mapping (apiVersion, kind, metadata, spec), "
            f"got {type(data).__name__}",
            src.where(),
        )
        return None
    kind = _kind_of(data, src, collector)
    metadata = convert(data.get("metadata"), Metadata, src, ("metadata",), collector)
    if kind is None or metadata is None:
        return None
    check_name = package_name_problem if kind is Kind.PACKAGE else name_problem
    problem = check_name(metadata.name)
    if problem:
        collector.error(
            ErrorCode.E_CONFIG_INVALID_NAME,
            problem,
            src.where(("metadata", "name")),
            "rename it, e.g. my-agent (letters, digits, '-' and '_'; no '__')",
        )
        return None
    spec = convert(data.get("spec") or {}, SPEC_TYPES[kind], src, ("spec",), collector)
    if spec is None:
        return None
    return Resource(
        kind=kind,
        metadata=metadata,
        spec=spec,
        location=SourceLocation(file, src.doc.line, src.doc.index),
        root=root,
        raw=dict(data),
    )


def _identity(data: Any) -> tuple[Kind, str] | None:
    """Kind and name of a document that failed its checks, when they can still be read."""
    if not isinstance(data, dict) or not isinstance(data.get("metadata"), dict):
        return None
    name = data["metadata"].get("name")
    kind = data.get("kind")
    if isinstance(name, str) and kind in {k.value for k in Kind}:
        return Kind(kind), name
    return None


def _load_resources(
    main: Path, *, prefix: str, collector: Collector, broken: set[tuple[Kind, str]]
) -> list[tuple[Resource[Any], SourceDoc]]:
    root = main.parent
    out: list[tuple[Resource[Any], SourceDoc]] = []
    for file, src, position in _read_documents(bundle_files(main), root, prefix, collector):
        res = _resource(src, file, root=root, collector=collector)
        if res is None:
            identity = _identity(src.doc.data)
            if identity is not None:
                broken.add(identity)
            continue
        if res.kind is Kind.PACKAGE and (file != main or position != 0):
            collector.error(
                ErrorCode.E_CONFIG_PACKAGE_DOC_POSITION,
                "a Package document must be the first document of goondan.yaml",
                src.where(("kind",)),
                f"move it to the top of {main.name} (only one Package per bundle)",
            )
            continue
        out.append((res, src))
    return out


Loaded = list[tuple[Resource[Any], SourceDoc]]


def _main_of(directory: Path) -> Path | None:
    return next((directory / n for n in MAIN_FILES if (directory / n).is_file()), None)


def _load_package(
    pkg_dir: Path, default_name: str, collector: Collector, broken: set[tuple[Kind, str]]
) -> Loaded:
    """A package's resources, tagged with its name (from its Package document if it has one)."""
    main = _main_of(pkg_dir)
    if main is None:
        return []
    return _tagged(main, _package_name(main, default_name), collector, broken)


def _tagged(main: Path, name: str, collector: Collector, broken: set[tuple[Kind, str]]) -> Loaded:
    found = _load_resources(main, prefix=name, collector=collector, broken=broken)
    return [(dataclasses.replace(r, package=name), src) for r, src in found]


def _load_installed(
    main: Path, user: Loaded, collector: Collector, broken: set[tuple[Kind, str]]
) -> tuple[Loaded, dict[str, str]]:
    """`@goondan/base` and the packages the bundle depends on (and theirs, transitively), each
    dependency checked against what is installed; with the version of each package loaded."""
    index = installed()
    queue = [Requirement(BASE_PACKAGE, None, distribution_for(BASE_PACKAGE), main.name)]
    queue += _declared(user, collector)
    out: Loaded = []
    versions: dict[str, str] = {}
    while queue:
        pkg = check(queue.pop(0), index, collector)
        if pkg is None or pkg.name in versions:
            continue
        versions[pkg.name] = pkg.version
        found = _load_installed_package(pkg, collector, broken)
        out += found
        queue += _declared(found, collector)
    return out, versions


def _declared(loaded: Loaded, collector: Collector) -> list[Requirement]:
    doc = next(((r, src) for r, src in loaded if r.kind is Kind.PACKAGE), None)
    return [] if doc is None else requirements(doc[0], doc[1].where, collector)


def _load_installed_package(
    pkg: InstalledPackage, collector: Collector, broken: set[tuple[Kind, str]]
) -> Loaded:
    assert pkg.directory is not None  # `check` returns usable packages only
    main = _main_of(pkg.directory)
    what = f"package {pkg.name} ({pkg.distribution} {pkg.version})"
    if main is None:
        collector.error(
            ErrorCode.E_PACKAGE_INVALID,
            f"{what} has no {MAIN_FILES[0]} in {pkg.directory}",
            f"{pkg.name}/{MAIN_FILES[0]}",
            f"reinstall {pkg.distribution}; its module {pkg.module} must hold {MAIN_FILES[0]}",
        )
        return []
    named = _package_name(main, pkg.name)
    if named != pkg.name:
        collector.error(
            ErrorCode.E_PACKAGE_INVALID,
            f"{what}: its Package document is named {named}, its entry point {pkg.name}",
            f"{pkg.name}/{main.name}",
            "the distribution must use one name for both",
        )
    return _tagged(main, pkg.name, collector, broken)


def _package_name(main: Path, default: str) -> str:
    """The name in the package's leading Package document (read once more, errors ignored:
    the real load reports them), so that diagnostics already carry the right prefix."""
    try:
        docs = load_file(main, main.name, limit=1)
    except YamlFileError:
        return default
    first = docs[0].data if docs else None
    if isinstance(first, dict) and first.get("kind") == Kind.PACKAGE.value:
        name = (
            first.get("metadata", {}).get("name")
            if isinstance(first.get("metadata"), dict)
            else None
        )
        if isinstance(name, str) and package_name_problem(name) is None:
            return name
    return default


def _in_file_order(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    def key(d: Diagnostic) -> tuple[str, int]:
        where = d.path.split(" ", 1)[0]
        file, _, line = where.rpartition(":")
        return (file, int(line)) if line.isdigit() else (where, 0)

    return sorted(diagnostics, key=key)


def inspect_bundle(
    path: Path | str,
    *,
    env_files: Sequence[Path] = (),
    state_root: Path | None = None,
    strict: bool = False,
    require_swarm: bool = True,
    packages: Sequence[Path] | None = None,
) -> BundleReport:
    """Load and check a bundle, returning every error and warning instead of raising.

    `packages` are directories holding a package's goondan.yaml, used as they are (no version
    or dependency checks); by default the installed packages the bundle depends on, and
    `@goondan/base`. With `strict`, warnings count as errors.
    """
    collector = Collector()
    try:
        main = find_main_file(Path(path))
    except BundleError as exc:
        return BundleReport(None, exc.diagnostics)
    broken: set[tuple[Kind, str]] = set()
    loaded = _load_resources(main, prefix="", collector=collector, broken=broken)
    versions: dict[str, str] | None = None
    if packages is None:
        found, versions = _load_installed(main, loaded, collector, broken)
        loaded += found
    else:
        for pkg_dir in packages:
            loaded += _load_package(Path(pkg_dir), Path(pkg_dir).name, collector, broken)
    incomplete = any(d.code in _UNREADABLE for d in collector.errors)
    resources = [res for res, _ in loaded]
    sources: SourceMap = {id(res): src for res, src in loaded}
    env = load_env_files(main.parent, [Path(p) for p in env_files], collector)
    bundle = Bundle(path=main, root=main.parent, resources=resources, env=env, packages=versions)
    options = Options(
        state_root=state_root,
        require_swarm=require_swarm,
        broken=frozenset(broken),
        incomplete=incomplete,
    )
    bundle.secret_values = Checks(bundle, sources, collector, options).run()
    errors, warnings = _in_file_order(collector.errors), _in_file_order(collector.warnings)
    if strict:
        errors = errors + [
            Diagnostic(w.code, w.message, w.path, w.suggestion, Severity.ERROR) for w in warnings
        ]
        warnings = []
    return BundleReport(None if errors else bundle, errors, warnings)


def load_bundle(
    path: Path | str,
    *,
    env_files: Sequence[Path] = (),
    state_root: Path | None = None,
    strict: bool = False,
    require_swarm: bool = True,
    packages: Sequence[Path] | None = None,
) -> Bundle:
    """The validated bundle at `path` (a goondan.yaml or its directory).

    Raises `BundleError` with every diagnostic when anything is wrong; warnings (e.g. an env
    variable that is not set yet) do not fail the load unless `strict`.
    """
    report = inspect_bundle(
        path,
        env_files=env_files,
        state_root=state_root,
        strict=strict,
        require_swarm=require_swarm,
        packages=packages,
    )
    if report.bundle is None:
        raise BundleError(report.errors, report.warnings)
    return report.bundle
