"""Strict conversion of YAML data into the kind Structs, with msgspec's error path mapped back
to the YAML line (`$.spec.tools[1].ref` -> `goondan.yaml:14 spec.tools[1].ref`)."""

from __future__ import annotations

import difflib
import re
import typing
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


def _suggestion(message: str, type_: Any, rel: FieldPath) -> str:
    unknown = _UNKNOWN.match(message)
    if unknown:
        near = difflib.get_close_matches(unknown["field"], _field_names(type_, rel[:-1]), n=1)
        if near:
            return f"did you mean `{near[0]}`?"
        return "remove the field or fix its spelling (field names are camelCase)"
    missing = _MISSING.match(message)
    if missing:
        return f"add the required field `{missing['field']}`"
    return "change the value to the expected type"


def _field_names(type_: Any, path: FieldPath) -> list[str]:
    """The YAML names of the fields of the Struct at `path` under `type_` (none if the path
    leads elsewhere): what an unknown field may have meant."""
    found = _struct_at(type_, path)
    return [f.encode_name for f in msgspec.structs.fields(found)] if found is not None else []


def _struct_at(type_: Any, path: FieldPath) -> Any:
    for segment in path:
        struct = _struct_of(type_)
        if struct is None:
            return None
        if isinstance(segment, int):
            return None  # a list element: the Struct of a list field is found below
        fields = {f.encode_name: f.type for f in msgspec.structs.fields(struct)}
        if segment not in fields:
            return None
        type_ = fields[segment]
        args = [a for a in typing.get_args(type_) if a is not type(None)]
        if typing.get_origin(type_) is list and args:
            type_ = args[0]
    return _struct_of(type_)


def _struct_of(type_: Any) -> Any:
    """`type_` if it is a Struct, the Struct of an Optional or a union with one, else None."""
    if isinstance(type_, type) and issubclass(type_, msgspec.Struct):
        return type_
    structs = [
        a for a in typing.get_args(type_) if isinstance(a, type) and issubclass(a, msgspec.Struct)
    ]
    return structs[0] if len(structs) == 1 else None


def _without(data: Any, path: FieldPath) -> Any | None:
    """A copy of `data` without the value at `path` (a mapping key), None when it cannot be
    removed: what lets the next error of the same document show."""
    if not path or not isinstance(path[-1], str):
        return None
    copy = _copy(data)
    node = copy
    for segment in path[:-1]:
        try:
            node = node[segment]
        except (KeyError, IndexError, TypeError):
            return None
    if not isinstance(node, dict) or path[-1] not in node:
        return None
    del node[path[-1]]
    return copy


def _copy(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _copy(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_copy(v) for v in data]
    return data


MAX_ERRORS = 20
"""Errors reported per document: each one found is left out and the document converted again."""


def convert(
    data: Any, type_: type[T], src: SourceDoc, base: FieldPath, collector: Collector
) -> T | None:
    """`msgspec.convert(data, type_)`; on failure an E_CONFIG_SCHEMA_INVALID naming each bad
    field (msgspec stops at the first: each is left out and the rest converted again)."""
    removed: set[FieldPath] = set()
    unknown: dict[FieldPath, list[str]] = {}
    """The unknown fields left out, by the mapping that held them."""
    for _ in range(MAX_ERRORS):
        try:
            converted = msgspec.convert(data, type_)
        except msgspec.ValidationError as exc:
            message, rel = error_location(str(exc))
            missing = _MISSING.match(message)
            if missing and (
                (*rel, missing["field"]) in removed
                or difflib.get_close_matches(missing["field"], unknown.get(rel, []), n=1)
            ):
                # the field left out for its own error, or misspelled as an unknown field of
                # the same mapping (`provder`): said already, with its "did you mean"
                return None
            path = (*base, *rel)
            field_text = ".".join(str(p) for p in path) if path else "document"
            collector.error(
                ErrorCode.E_CONFIG_SCHEMA_INVALID,
                f"{message} (field {field_text})" if path else message,
                src.where(path),
                _suggestion(message, type_, rel),
            )
            rest = _without(data, rel)
            if rest is None:
                return None
            removed.add(rel)
            if _UNKNOWN.match(message):
                unknown.setdefault(rel[:-1], []).append(str(rel[-1]))
            data = rest
        else:  # what is left converts: the errors found are all (a partial result is none)
            return None if removed else converted
    return None
