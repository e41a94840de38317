"""`json-query`: read values out of JSON without writing code.

Exports `query` (a small path language), `pick` (keep some keys), `count` and `flatten`.
`data` is any JSON value; a string is parsed as JSON text first (so a tool's raw output can be
passed as is).

Path language: an optional leading `$`, then segments: `.name` or `name` first, `["any key"]`,
`[0]` / `[-1]` (index), `[1:3]` (slice), `.*` / `[*]` (every element or value). Once a path has a
wildcard or slice, the result is a list of every match; otherwise it is the single value found.
"""

from __future__ import annotations

import json
import re
from typing import Any

from bundles.sdk import JsonObject, JsonValue, ToolContext, ToolFailed
from protocol.errors import ErrorCode

_NAME = re.compile(r"[A-Za-z_$][\w$-]*")
_INDEX = re.compile(r"\[\s*(-?\d+)\s*\]")
_SLICE = re.compile(r"\[\s*(-?\d+)?\s*:\s*(-?\d+)?\s*\]")
_QUOTED = re.compile(r"""\[\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')\s*\]""")
_WILDCARD = re.compile(r"\.\*|\[\s*\*\s*\]")

Segment = tuple[str, Any]  # ("key", str) | ("index", int) | ("slice", slice) | ("all", None)


def _bad_path(path: str, at: int) -> ToolFailed:
    return ToolFailed(
        f"cannot parse path {path!r} at position {at}",
        code=ErrorCode.E_TOOL_QUERY_INVALID,
        suggestion='Use segments like .name, ["key with spaces"], [0], [-1], [1:3], [*] or .*',
    )


def _quoted_key(token: str) -> str:
    if token.startswith("'"):
        token = '"' + token[1:-1].replace('\\"', '"').replace('"', '\\"') + '"'
    return str(json.loads(token))


def _segment_at(path: str, i: int, *, first: bool) -> tuple[Segment, int]:
    """The segment starting at `path[i]` and the index after it."""
    if m := _WILDCARD.match(path, i):
        return ("all", None), m.end()
    if m := _INDEX.match(path, i):
        return ("index", int(m.group(1))), m.end()
    if m := _SLICE.match(path, i):
        bounds = [int(b) if b is not None else None for b in m.groups()]
        return ("slice", slice(*bounds)), m.end()
    if m := _QUOTED.match(path, i):
        return ("key", _quoted_key(m.group(1))), m.end()
    dotted = path.startswith(".", i)
    if (dotted or first) and (m := _NAME.match(path, i + 1 if dotted else i)):
        return ("key", m.group(0)), m.end()
    raise _bad_path(path, i)


def parse_path(path: str) -> list[Segment]:
    """`$.a.b[0]`, `a.b[0]`, `.a["x y"][*]`, ... into segments; `$` or "" is the whole value."""
    text = path.strip().removeprefix("$")
    segments: list[Segment] = []
    i = 0
    while i < len(text):
        segment, i = _segment_at(text, i, first=not segments)
        segments.append(segment)
    return segments


def _step(value: Any, segment: Segment) -> list[Any]:
    """What one segment selects from one value (nothing when it does not apply)."""
    kind, arg = segment
    if kind == "all":
        if isinstance(value, dict):
            return list(value.values())
        return list(value) if isinstance(value, list) else []
    if kind == "slice":
        return list(value[arg]) if isinstance(value, list) else []
    fits = isinstance(value, dict) if kind == "key" else isinstance(value, list)
    if fits and (arg in value if kind == "key" else -len(value) <= arg < len(value)):
        return [value[arg]]
    return []


def evaluate(data: Any, path: str) -> tuple[Any, bool]:
    """(result, found): a list for paths with `*` or slices, else the one value or None."""
    segments = parse_path(path)
    current = [data]
    for segment in segments:
        current = [item for value in current for item in _step(value, segment)]
    if any(kind in ("all", "slice") for kind, _ in segments):
        return current, bool(current)
    return (current[0], True) if current else (None, False)


def _data(input: JsonObject) -> Any:
    data = input.get("data")
    if isinstance(data, str):
        try:
            return json.loads(data)
        except json.JSONDecodeError as error:
            raise ToolFailed(
                f"data is a string but not JSON text: {error}",
                code=ErrorCode.E_TOOL_QUERY_INVALID,
                suggestion="Pass the JSON value itself, or valid JSON text.",
            ) from None
    return data


def _target(input: JsonObject) -> Any:
    data = _data(input)
    path = input.get("path")
    return evaluate(data, str(path))[0] if path else data


def query(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """The value(s) at `path` in `data`."""
    result, found = evaluate(_data(input), str(input["path"]))
    return {"result": result, "found": found}


def _pick_one(value: Any, keys: list[str]) -> Any:
    if not isinstance(value, dict):
        raise ToolFailed(
            f"pick needs an object or a list of objects, found {type(value).__name__}",
            code=ErrorCode.E_TOOL_INVALID_ARGS,
        )
    return {key: value[key] for key in keys if key in value}


def pick(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """Keep only `keys` of an object, or of every object in a list."""
    target = _target(input)
    keys = [str(k) for k in input["keys"]]
    if isinstance(target, list):
        return {"result": [_pick_one(item, keys) for item in target]}
    return {"result": _pick_one(target, keys)}


def count(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """Items of an array, keys of an object, or characters of a string (null counts 0)."""
    target = _target(input)
    if target is None:
        return {"count": 0}
    if isinstance(target, list | dict | str):
        return {"count": len(target)}
    raise ToolFailed(
        f"cannot count a {type(target).__name__}",
        code=ErrorCode.E_TOOL_INVALID_ARGS,
        suggestion="Point `path` at an array, object or string.",
    )


def _flatten_list(value: list[Any], depth: int) -> list[Any]:
    out: list[Any] = []
    for item in value:
        if isinstance(item, list) and depth != 0:
            out.extend(_flatten_list(item, depth - 1))
        else:
            out.append(item)
    return out


def _flatten_object(value: dict[str, Any], depth: int, sep: str, prefix: str = "") -> JsonObject:
    out: JsonObject = {}
    for key, item in value.items():
        name = f"{prefix}{sep}{key}" if prefix else str(key)
        if isinstance(item, dict) and item and depth != 0:
            out.update(_flatten_object(item, depth - 1, sep, name))
        else:
            out[name] = item
    return out


def flatten(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """Nested arrays into one array, or nested objects into one object with joined keys."""
    target = _target(input)
    depth = int(input.get("depth", 1))
    result: JsonValue
    if isinstance(target, list):
        result = _flatten_list(target, depth)
    elif isinstance(target, dict):
        result = _flatten_object(target, depth, str(input.get("separator", ".")))
    else:
        raise ToolFailed(
            f"cannot flatten a {type(target).__name__}", code=ErrorCode.E_TOOL_INVALID_ARGS
        )
    return {"result": result}


handlers = {"query": query, "pick": pick, "count": count, "flatten": flatten}
