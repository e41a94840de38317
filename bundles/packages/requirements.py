"""A bundle's (or a package's) `spec.dependencies`, checked against the installed packages.

`{"@acme/github": ">=1.2,<2"}`: each named package must be installed (E_PACKAGE_NOT_INSTALLED,
with the `pip install` / `uv add` line that fixes it), usable (E_PACKAGE_INVALID) and inside the
range (E_PACKAGE_VERSION, installed vs wanted). `@goondan/base` is always available; listing it
checks its version. A resource reaches only its own package, `@goondan/base` and the packages
its bundle or package lists (`reachable`, used by `bundles.resolve`): installing a package does
not change what an existing bundle's short references mean.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from bundles.diagnostics import Collector, FieldPath
from bundles.kinds import BASE_PACKAGE, Kind, PackageRequirement, PackageSpec
from bundles.model import Bundle, Resource
from bundles.naming import package_name_problem
from bundles.packages.installed import GOONDAN_DISTRIBUTION, InstalledPackage
from protocol.errors import ErrorCode

_DISTRIBUTION = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,98}[A-Za-z0-9])?$")
"""A distribution name as PEP 508 spells it (it is put into an install command line)."""

Where = Callable[[FieldPath], str]
"""The `file:line field.path` of a field of the declaring document."""


@dataclass(frozen=True, slots=True)
class Requirement:
    name: str
    specifier: str | None
    """PEP 440 specifiers as written; None: any version."""
    distribution: str
    where: str
    """Where it is declared (the bundle's main file for the implicit `@goondan/base`)."""


def distribution_for(name: str) -> str:
    """The distribution assumed to provide `name` when the dependency does not say:
    `@acme/github` -> `acme-github`, `tools` -> `tools`, `@goondan/base` -> goondan's own."""
    if name == BASE_PACKAGE:
        return GOONDAN_DISTRIBUTION
    return name.removeprefix("@").replace("/", "-")


def install_hint(distribution: str, specifier: str | None) -> str:
    if distribution == GOONDAN_DISTRIBUTION:
        # `@goondan/base` comes with goondan itself: missing, goondan's install is broken
        return "reinstall goondan (`make install` in its checkout): its entry point serves it"
    target = shlex.quote(f"{distribution}{specifier or ''}")
    return f"install it: pip install {target} (or, in a uv project: uv add {target})"


def compatible_range(version: str) -> str:
    """`>=1.4.2,<2` for 1.4.2; `>=0.3.1,<0.4` below 1.0, where a minor release may break."""
    from packaging.version import InvalidVersion, Version

    try:
        parsed = Version(version)
    except InvalidVersion:
        return f"=={version}"
    if parsed.major == 0:
        return f">={parsed.base_version},<0.{parsed.minor + 1}"
    return f">={parsed.base_version},<{parsed.major + 1}"


def requirements(
    doc: Resource[PackageSpec] | None, where: Where, collector: Collector
) -> list[Requirement]:
    """The dependencies `doc` declares; a bad name, range or distribution is reported and
    left out."""
    if doc is None:
        return []
    found = [
        _requirement(name, value, where, collector) for name, value in doc.spec.dependencies.items()
    ]
    return [req for req in found if req is not None]


def _requirement(
    name: str, value: str | PackageRequirement | None, where: Where, collector: Collector
) -> Requirement | None:
    at: FieldPath = ("spec", "dependencies", name)
    problem = package_name_problem(name)
    if problem:
        collector.error(ErrorCode.E_CONFIG_INVALID_NAME, problem, where(at), "e.g. @acme/github")
        return None
    long = value if isinstance(value, PackageRequirement) else None
    specifier = long.version if long is not None else value if isinstance(value, str) else None
    if specifier is not None and not _valid_range(specifier):
        collector.error(
            ErrorCode.E_CONFIG_SCHEMA_INVALID,
            f"{specifier!r} is not a PEP 440 version range",
            where(at),
            'write e.g. ">=1.2,<2", "==1.4.*" or null for any version',
        )
        return None
    distribution = (long.distribution if long else None) or distribution_for(name)
    if not _DISTRIBUTION.match(distribution):
        collector.error(
            ErrorCode.E_CONFIG_INVALID_NAME,
            f"{distribution!r} is not a Python distribution name",
            where((*at, "distribution")),
            "letters, digits, '.', '-' and '_', e.g. acme-github",
        )
        return None
    return Requirement(name, specifier or None, distribution, where(at))


def _valid_range(specifier: str) -> bool:
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        SpecifierSet(specifier)
    except InvalidSpecifier:
        return False
    return True


def check(
    req: Requirement, index: Mapping[str, InstalledPackage], collector: Collector
) -> InstalledPackage | None:
    """The installed package that meets `req` well enough to load (its resources are loaded
    even when its version is out of range, so that only the version is reported)."""
    pkg = index.get(req.name)
    if pkg is None:
        collector.error(
            ErrorCode.E_PACKAGE_NOT_INSTALLED,
            f"package {req.name} is not installed (distribution {req.distribution})",
            req.where,
            install_hint(req.distribution, req.specifier),
        )
        return None
    if pkg.problem is not None or pkg.directory is None:
        collector.error(
            ErrorCode.E_PACKAGE_INVALID,
            f"package {req.name} ({pkg.distribution} {pkg.version}) cannot be used: {pkg.problem}",
            req.where,
            f"reinstall or fix the distribution {pkg.distribution}",
        )
        return None
    if req.specifier is not None and not _in_range(pkg.version, req.specifier):
        collector.error(
            ErrorCode.E_PACKAGE_VERSION,
            f"package {req.name}: {pkg.distribution} {pkg.version} is installed, "
            f"{req.specifier} is wanted",
            req.where,
            install_hint(pkg.distribution, req.specifier),
        )
    return pkg


def _in_range(version: str, specifier: str) -> bool:
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        parsed = Version(version)
    except InvalidVersion:
        return False
    # an installed pre-release was chosen by whoever installed it: it counts when in range
    return SpecifierSet(specifier).contains(parsed, prereleases=True)


def reachable(bundle: Bundle, scope: str | None) -> frozenset[str] | None:
    """The packages the resources of `scope` (None: the user's bundle) may name; None when
    the caller chose the package directories itself and nothing is restricted."""
    if bundle.packages is None:
        return None
    doc = _package_doc(bundle, scope)
    declared = doc.spec.dependencies if doc is not None else {}
    return frozenset({BASE_PACKAGE, *declared, *([scope] if scope else [])})


def _package_doc(bundle: Bundle, scope: str | None) -> Resource[PackageSpec] | None:
    found: Resource[Any] | None = next(
        (r for r in bundle.resources if r.kind is Kind.PACKAGE and r.package == scope), None
    )
    return found
