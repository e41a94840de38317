"""The goondan packages installed in this Python environment, found by entry point.

A distribution declares `[project.entry-points."goondan.packages"] "@acme/github" =
"acme_github"`: the entry's name is the package's name, its value a module whose directory holds
the package's goondan.yaml and code. goondan's own distribution serves `@goondan/base`
(bundles/base) through the same entry point, so there is one way to find a package.

The module is located, never imported: finding a top-level module runs only the import system's
finders, and the rest of a dotted name is followed as directories. A package's code therefore
runs only where bundle code runs, in agent and connector processes. The scan of the
environment's metadata is cached until a `sys.path` directory changes (an install or uninstall
renames a `*.dist-info` directory, which changes its parent's mtime).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bundles.naming import package_name_problem

if TYPE_CHECKING:  # importlib.metadata (email, zipfile, csv) loads only when a scan runs
    from importlib.metadata import Distribution, EntryPoint

ENTRY_POINT_GROUP = "goondan.packages"
GOONDAN_DISTRIBUTION = "goondan-daemon"
"""goondan's own distribution, which provides `@goondan/base`."""


@dataclass(frozen=True, slots=True)
class InstalledPackage:
    name: str
    """`@acme/github`: the entry point's name."""
    distribution: str
    version: str
    module: str
    """The entry point's value."""
    directory: Path | None
    """Where the package's goondan.yaml and code are; None when `problem` says why not."""
    source: str | None = None
    """Where the distribution was installed from when not from an index (PEP 610
    direct_url.json: a local path, an archive URL, a VCS URL), `(editable)` appended."""
    problem: str | None = None
    """Why the package cannot be used; None when it can."""


@dataclass(slots=True)
class _Cache:
    key: tuple[tuple[str, int], ...] | None = None
    packages: dict[str, InstalledPackage] | None = None


_cache = _Cache()


def installed() -> dict[str, InstalledPackage]:
    """Every installed goondan package by name (a copy: callers may change it)."""
    key = _path_state()
    if _cache.packages is None or _cache.key != key:
        _cache.packages, _cache.key = _scan(), key
    return dict(_cache.packages)


def clear_cache() -> None:
    """Forget the last scan (tests that change the environment within one mtime tick)."""
    _cache.key = _cache.packages = None


def _path_state() -> tuple[tuple[str, int], ...]:
    out = []
    for entry in sys.path:
        try:
            out.append((entry, os.stat(entry or ".").st_mtime_ns))
        except OSError:
            out.append((entry, -1))
    return tuple(out)


def _scan() -> dict[str, InstalledPackage]:
    from importlib.metadata import entry_points

    claims: dict[str, list[InstalledPackage]] = {}
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        found = _package(entry)
        claims.setdefault(found.name, []).append(found)
    return {name: _one(found) for name, found in claims.items()}


def _one(claims: list[InstalledPackage]) -> InstalledPackage:
    """The package; when several distributions claim its name, none of them is used."""
    if len(claims) == 1:
        return claims[0]
    names = " and ".join(sorted(f"{c.distribution} {c.version}" for c in claims))
    first = min(claims, key=lambda c: c.distribution)
    problem = f"claimed by the distributions {names}: uninstall all but one"
    return InstalledPackage(
        first.name, first.distribution, first.version, first.module, None, first.source, problem
    )


def _package(entry: EntryPoint) -> InstalledPackage:
    dist = entry.dist
    distribution = dist.name if dist is not None else "?"
    version = dist.version if dist is not None else "?"
    source = _source(dist) if dist is not None else None
    directory, problem = _locate(entry.module)
    if entry.attr:
        directory, problem = None, f"the entry point's value {entry.value!r} must be a module"
    name_problem = package_name_problem(entry.name)
    if name_problem:
        directory, problem = None, name_problem
    return InstalledPackage(
        entry.name, distribution, version, entry.module, directory, source, problem
    )


def _locate(module: str) -> tuple[Path | None, str | None]:
    """The directory of `module` (a package, regular or namespace), found without running it."""
    top, *rest = module.split(".")
    if not all(part.isidentifier() for part in (top, *rest)):
        return None, f"{module!r} is not a module name"
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for base in locations:
        directory = Path(base).joinpath(*rest)
        if directory.is_dir():
            return directory, None
    return None, f"module {module!r} is not an installed package directory"


def _source(dist: Distribution) -> str | None:
    """PEP 610: where a distribution not installed from an index came from."""
    text = dist.read_text("direct_url.json")
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    url = data.get("url") if isinstance(data, dict) else None
    if not isinstance(url, str):
        return None
    editable = isinstance(data.get("dir_info"), dict) and data["dir_info"].get("editable")
    return f"{url} (editable)" if editable else url
