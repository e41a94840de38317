"""A loaded, validated bundle: resources with where they came from, and ref resolution.

`bundles.loader.load_bundle()` builds a `Bundle`; the orchestrator and the agent processes
only read it. Every resource remembers its file and line so any later error can name them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from bundles.kinds import (
    AgentSpec,
    ConnectionSpec,
    ConnectorSpec,
    ExtensionSpec,
    Kind,
    Metadata,
    ModelSpec,
    PackageSpec,
    SwarmSpec,
    ToolSpec,
)

S = TypeVar("S")


@dataclass(frozen=True, slots=True)
class SourceLocation:
    file: Path
    line: int
    document: int
    """0-based index of the YAML document in its file."""

    def __str__(self) -> str:
        return f"{self.file.name}:{self.line}"


@dataclass(frozen=True, slots=True)
class Resource(Generic[S]):
    kind: Kind
    metadata: Metadata
    spec: S
    location: SourceLocation
    package: str | None = None
    """None for the user's bundle; the package name (e.g. `@goondan/base`) otherwise."""
    root: Path = field(default_factory=Path)
    """The directory relative to which this resource's paths (entry, systemRef) resolve."""
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """The document as parsed (after overrides), for fingerprinting changes."""

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def key(self) -> str:
        """`Kind/name` (with `package:` prefix for package resources)."""
        prefix = f"{self.package}:" if self.package else ""
        return f"{prefix}{self.kind}/{self.name}"


@dataclass(slots=True)
class Bundle:
    """Every resource of the user's bundle plus the packages it may reference."""

    path: Path
    """The bundle's goondan.yaml (or directory it was loaded from)."""
    root: Path
    resources: list[Resource[Any]] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    """Variables from .env / .env.local / --env-file, never overriding the process env."""
    secret_values: frozenset[str] = frozenset()
    """What the bundle marks as secret (`bundles.credentials`): masked in logs, kept from
    subprocesses."""
    packages: dict[str, str] | None = None
    """The installed packages loaded with the bundle (`bundles.packages`), name -> version.
    None when the caller chose package directories itself: references are then not held to
    the declared dependencies."""

    def of_kind(self, kind: Kind, *, user_only: bool = False) -> Iterator[Resource[Any]]:
        """Resources of `kind`; with `user_only`, those of the user's bundle (not packages)."""
        for res in self.resources:
            if res.kind is kind and not (user_only and res.package is not None):
                yield res

    def find(self, kind: Kind, name: str, package: str | None = None) -> Resource[Any] | None:
        """User resources first, then packages; `package` restricts the search."""
        candidates = [r for r in self.resources if r.kind is kind and r.name == name]
        if package is not None:
            candidates = [r for r in candidates if r.package == package]
        candidates.sort(key=lambda r: r.package is not None)
        return candidates[0] if candidates else None

    # typed accessors; each raises KeyError naming what is missing
    def _get(self, kind: Kind, name: str, package: str | None) -> Resource[Any]:
        res = self.find(kind, name, package)
        if res is None:
            raise KeyError(f"{kind}/{name} is not in the bundle")
        return res

    def agent(self, name: str) -> Resource[AgentSpec]:
        return self._get(Kind.AGENT, name, None)

    def model(self, name: str, package: str | None = None) -> Resource[ModelSpec]:
        return self._get(Kind.MODEL, name, package)

    def swarm(self, name: str | None = None) -> Resource[SwarmSpec]:
        """The named swarm, or the only/first swarm of the user's bundle."""
        swarms = [r for r in self.resources if r.kind is Kind.SWARM and r.package is None]
        if name is not None:
            return self._get(Kind.SWARM, name, None)
        if not swarms:
            raise KeyError("the bundle declares no Swarm")
        return swarms[0]

    def tool(self, name: str, package: str | None = None) -> Resource[ToolSpec]:
        return self._get(Kind.TOOL, name, package)

    def extension(self, name: str, package: str | None = None) -> Resource[ExtensionSpec]:
        return self._get(Kind.EXTENSION, name, package)

    def connector(self, name: str, package: str | None = None) -> Resource[ConnectorSpec]:
        return self._get(Kind.CONNECTOR, name, package)

    def connections(self) -> list[Resource[ConnectionSpec]]:
        return list(self.of_kind(Kind.CONNECTION, user_only=True))

    def package(self) -> Resource[PackageSpec] | None:
        return next(self.of_kind(Kind.PACKAGE, user_only=True), None)
