"""Coded config errors: one `Diagnostic` per problem, all of them raised at once in `BundleError`.

A diagnostic's `path` is where the user has to look: `goondan.yaml:14 spec.tools[1].ref` (file,
line, then the field path inside the document). The loader collects every diagnostic of a
bundle before it raises, so one run of `goondan validate` shows the whole list.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from protocol.errors import ErrorCode

FieldPath = tuple[str | int, ...]
"""A path inside one YAML document: mapping keys and sequence indexes, e.g. ("spec", "tools", 1)."""


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True, slots=True)
class Diagnostic:
    code: ErrorCode
    message: str
    path: str
    """`file:line field.path`, or just `file` when the problem is the whole file."""
    suggestion: str | None = None
    severity: Severity = Severity.ERROR

    def __str__(self) -> str:
        hint = f" ({self.suggestion})" if self.suggestion else ""
        return f"{self.path}: {self.code} {self.message}{hint}"

    def to_dict(self) -> dict[str, str | None]:
        return {
            "code": str(self.code),
            "message": self.message,
            "path": self.path,
            "suggestion": self.suggestion,
            "severity": str(self.severity),
        }


class BundleError(Exception):
    """A bundle that cannot be used: carries every error found (and the warnings) at once."""

    def __init__(
        self, diagnostics: Sequence[Diagnostic], warnings: Sequence[Diagnostic] = ()
    ) -> None:
        self.diagnostics: list[Diagnostic] = list(diagnostics)
        self.warnings: list[Diagnostic] = list(warnings)
        lines = [str(d) for d in self.diagnostics]
        super().__init__("invalid bundle:\n  " + "\n  ".join(lines) if lines else "invalid bundle")

    @property
    def codes(self) -> list[ErrorCode]:
        return [d.code for d in self.diagnostics]


def single(code: ErrorCode, message: str, path: str, suggestion: str | None = None) -> BundleError:
    """A `BundleError` with one diagnostic, for the runtime helpers (refs, values)."""
    return BundleError([Diagnostic(code, message, path, suggestion)])


def format_field(path: FieldPath) -> str:
    """`("spec", "tools", 1, "ref")` -> `spec.tools[1].ref`."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def format_location(file: str, line: int | None, path: FieldPath = ()) -> str:
    where = f"{file}:{line}" if line is not None else file
    field_text = format_field(path)
    return f"{where} {field_text}" if field_text else where


def closest(name: str, candidates: Iterable[str], *, limit: int = 3) -> list[str]:
    """The existing names closest to `name` (difflib), best first."""
    pool = sorted(set(candidates))
    return difflib.get_close_matches(name, pool, n=limit, cutoff=0.5)


def did_you_mean(name: str, candidates: Iterable[str], fallback: str) -> str:
    pool = sorted(set(candidates))
    near = closest(name, pool)
    if near:
        return "did you mean " + " or ".join(near) + "?"
    if pool:
        shown = ", ".join(pool[:8]) + (", ..." if len(pool) > 8 else "")
        return f"{fallback}; existing: {shown}"
    return fallback


@dataclass(slots=True)
class Collector:
    """Accumulates diagnostics while the loader and the checks run; nothing raises midway."""

    errors: list[Diagnostic] = field(default_factory=list)
    warnings: list[Diagnostic] = field(default_factory=list)

    def add(self, diagnostic: Diagnostic) -> None:
        if diagnostic.severity is Severity.WARNING:
            self.warnings.append(diagnostic)
        else:
            self.errors.append(diagnostic)

    def error(
        self, code: ErrorCode, message: str, path: str, suggestion: str | None = None
    ) -> None:
        self.errors.append(Diagnostic(code, message, path, suggestion))

    def warn(self, code: ErrorCode, message: str, path: str, suggestion: str | None = None) -> None:
        self.warnings.append(Diagnostic(code, message, path, suggestion, Severity.WARNING))

    def raise_if_errors(self) -> None:
        if self.errors:
            raise BundleError(self.errors, self.warnings)
