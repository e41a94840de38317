"""Turns a problem found on a resource into a diagnostic at the right `file:line field.path`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bundles.diagnostics import Collector, FieldPath, format_location
from bundles.documents import SourceDoc
from bundles.model import Resource
from bundles.paths import PathProblem
from bundles.resolve import RefFailure
from protocol.errors import ErrorCode

SourceMap = dict[int, SourceDoc]
"""id(resource) -> where it was written (resources are frozen and not hashable)."""


@dataclass(slots=True)
class Reporter:
    sources: SourceMap
    collector: Collector

    def where(self, res: Resource[Any], path: FieldPath = ()) -> str:
        src = self.sources.get(id(res))
        if src is None:
            return format_location(res.location.file.name, res.location.line, path)
        return src.where(path)

    def error(
        self,
        res: Resource[Any],
        path: FieldPath,
        code: ErrorCode,
        message: str,
        suggestion: str | None = None,
    ) -> None:
        self.collector.error(
            code, f"{res.kind}/{res.name}: {message}", self.where(res, path), suggestion
        )

    def warn(
        self,
        res: Resource[Any],
        path: FieldPath,
        code: ErrorCode,
        message: str,
        suggestion: str | None = None,
    ) -> None:
        self.collector.warn(
            code, f"{res.kind}/{res.name}: {message}", self.where(res, path), suggestion
        )

    def failure(
        self, res: Resource[Any], path: FieldPath, failure: RefFailure | PathProblem
    ) -> None:
        at = failure.at if isinstance(failure, RefFailure) else ()
        self.error(res, (*path, *at), failure.code, failure.message, failure.suggestion)
