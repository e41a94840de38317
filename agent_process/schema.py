"""Argument validation against an export's JSON Schema (draft 2020-12), compiled once per export.

The check that runs on every call is `is_valid` of the fastest real 2020-12 validator available:
jsonschema-rs when installed (much faster), else the reference `jsonschema`; `bench_tool_call`
measures the one installed. Both implement the whole draft; neither is a hand-written subset. Only
when arguments are invalid does the reference library produce the detailed report fed back to the
model (every failing path, plus the required and allowed keys), so the report reads the same either
way.

Checking a schema against the 2020-12 metaschema costs milliseconds per export with the reference
library (it follows every `$ref`/`$dynamicRef` of the metaschema), so its verdict is memoized by the
schema's canonical JSON: a pure function of the content, and the fork server warms it with the
bundle's export schemas (`warm`) so forked children start with every verdict known.

The two compiled validators of a valid schema (a cost per export, felt with the 12 of bash
and file-system) are immutable and depend only on that content too, so they are memoized by the
same key and warmed the same way: a child's `ArgsValidator` only adds its tool name. jsonschema-rs
validators start no thread and hold no lock, so they are safe to use after a fork.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterable
from typing import Any, Protocol, cast

import jsonschema
import msgspec
from jsonschema import Draft202012Validator

from bundles.sdk import ToolFailed
from protocol.errors import ErrorCode

MAX_REPORTED_ERRORS = 10
MAX_REMEMBERED_SCHEMAS = 4096


class SchemaInvalid(ValueError):
    """The export's schema itself is not valid JSON Schema (a load-time error)."""


class _FastValidator(Protocol):
    def is_valid(self, instance: Any) -> bool: ...


def _fast_factory() -> Callable[[dict[str, Any]], _FastValidator] | None:
    try:
        module = importlib.import_module("jsonschema_rs")
    except ImportError:
        return None
    return cast(Callable[[dict[str, Any]], _FastValidator], module.Draft202012Validator)


_FAST = _fast_factory()


class ArgsValidator:
    """Validates one export's arguments; raise-or-return, built once at registry load."""

    __slots__ = ("_fast", "_reference", "_tool", "schema")

    def __init__(self, tool: str, schema: dict[str, Any]) -> None:
        self._tool = tool
        self.schema = schema
        self._reference, self._fast = _compiled(schema)

    @property
    def fast_backend(self) -> str:
        return type(self._fast).__module__.split(".")[0]

    def validate(self, args: Any) -> None:
        """Return if valid, else raise ToolFailed(E_TOOL_INVALID_ARGS) with the full report."""
        if self._fast.is_valid(args):
            return
        raise ToolFailed(
            self.report(args),
            code=ErrorCode.E_TOOL_INVALID_ARGS,
            suggestion=f"call {self._tool} again with arguments that match its parameters schema",
        )

    def report(self, args: Any) -> str:
        errors = sorted(self._reference.iter_errors(args), key=lambda e: list(e.absolute_path))
        lines = [f"invalid arguments for {self._tool}:"]
        for err in errors[:MAX_REPORTED_ERRORS]:
            lines.append(f"- at {_path(err.absolute_path)}: {err.message}")
        if len(errors) > MAX_REPORTED_ERRORS:
            lines.append(f"- ... and {len(errors) - MAX_REPORTED_ERRORS} more")
        required = self.schema.get("required") or []
        allowed = list((self.schema.get("properties") or {}).keys())
        lines.append(f"required keys: {_keys(required)}; allowed keys: {_keys(allowed)}")
        if self.schema.get("additionalProperties") is False:
            lines.append("no other keys are allowed")
        return "\n".join(lines)


_verdicts: dict[bytes, str | None] = {}
"""Canonical schema JSON -> None (valid) or the SchemaInvalid message."""
_Pair = tuple[Draft202012Validator, _FastValidator]
_validators: dict[bytes, _Pair] = {}
"""Canonical JSON of a valid schema -> its (reference, fast) validators."""


def _compiled(schema: dict[str, Any]) -> _Pair:
    """Raise SchemaInvalid, else the validators of `schema` (memoized by content)."""
    key = check_schema(schema)
    pair = _validators.get(key) if key is not None else None
    if pair is None:
        reference = Draft202012Validator(schema)
        pair = (reference, _FAST(schema) if _FAST is not None else reference)
        if key is not None:
            if len(_validators) >= MAX_REMEMBERED_SCHEMAS:
                _validators.clear()
            _validators[key] = pair
    return pair


def _canonical(schema: dict[str, Any]) -> bytes | None:
    try:
        return msgspec.json.encode(schema, order="sorted")
    except (TypeError, ValueError, msgspec.EncodeError):  # not plain JSON data
        return None


def check_schema(schema: dict[str, Any]) -> bytes | None:
    """Raise SchemaInvalid unless `schema` is valid 2020-12 JSON Schema (memoized by content);
    return its canonical JSON (None when it has none: then nothing is remembered)."""
    key = _canonical(schema)
    if key is not None and key in _verdicts:
        problem = _verdicts[key]
    else:
        problem = _metaschema_problem(schema)
        if key is not None:
            if len(_verdicts) >= MAX_REMEMBERED_SCHEMAS:
                _verdicts.clear()
            _verdicts[key] = problem
    if problem is not None:
        raise SchemaInvalid(problem)
    return key


def warm(schemas: Iterable[dict[str, Any]]) -> None:
    """Check and compile these schemas now (the fork server, before it forks), so children
    reuse the verdicts and the validators."""
    for schema in schemas:
        with contextlib.suppress(SchemaInvalid):  # remembered too; reported when loaded
            _compiled(schema)


def _metaschema_problem(schema: dict[str, Any]) -> str | None:
    try:
        Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        return f"parameters schema is invalid at {where}: {exc.message}"
    return None


def _path(parts: Iterable[Any]) -> str:
    text = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)
    return "$" + text if text else "$ (the arguments object)"


def _keys(keys: Iterable[Any]) -> str:
    items = [str(k) for k in keys]
    return ", ".join(items) if items else "(none)"
