"""Strict conversion of YAML data into the kind Structs, with msgspec's error path mapped back
to the YAML line (`$.spec.tools[1].ref` -> `goondan.yaml:14 spec.tools[1].ref`)."""

from __future__ import annotations

import re
from typing import Any, TypeVar

import msgspec

from bundles.diagnostics import Collector, FieldPath
from bundles.documents import SourceDoc
from protocol.errors import ErrorCode

T = TypeVar("T")

_AT = re.compile(r"^(?P<msg>.*?) - at `(?:key` in `)?\$(?P<path>[^`]*)`$", re.DOTALL)
_SEGMENT = re.compile(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]")
_UNKNOWN = re.compile(r"^Object contains unknown field `(?P<field>[^`]+)`")
_MISSING = re.compile(r"^Object missing required field `(?P<field>[^`]+)`")


def error_location(error: str) -> tuple[str, FieldPath]:
    """msgspec's message without the `- at ...` suffix, and the field path it names.

    A dict value shows as `[...]` in msgspec paths (the key is not reported), so the path stops
    at the dict itself. An unknown field is appended, so the line is the offending key's.
    """
    match = _AT.match(error)
    message, path_text = (match["msg"], match["path"]) if match else (error, "")
    path: list[str | int] = []
    for name, index in _SEGMENT.findall(path_text):
        if index == "...":
            break
        path.append(int(index) if index else name)
    unknown = _UNKNOWN.match(message)
    if unknown:
        path.append(unknown["field"])
    return message, tuple(path)


def _suggestion(message: str) -> str:
    if _UNKNOWN.match(message):
        return "remove the field or fix its spelling (field names are camelCase)"
    missing = _MISSING.match(message)
    if missing:
        return f"add the required field `{missing['field']}`"
    return "change the value to the expected type"


def convert(
    data: Any, type_: type[T], src: SourceDoc, base: FieldPath, collector: Collector
) -> T | None:
    """`msgspec.convert(data, type_)`; on failure one E_CONFIG_SCHEMA_INVALID naming the field."""
    try:
        return msgspec.convert(data, type_)
    except msgspec.ValidationError as exc:
        message, rel = error_location(str(exc))
        path = (*base, *rel)
        field_text = ".".join(str(p) for p in path) if path else "document"
        collector.error(
            ErrorCode.E_CONFIG_SCHEMA_INVALID,
            f"{message} (field {field_text})" if path else message,
            src.where(path),
            _suggestion(message),
        )
        return None
