"""`json-query`: read values out of JSON without writing code.

Exports `query` (a JSONPath query, RFC 9535), `pick` (keep some keys), `count` and `flatten`.
`data` is any JSON value; a string is parsed as JSON text first (so a tool's raw output can be
passed as is).

Paths are RFC 9535 JSONPath, evaluated by `python-jsonpath` in its strict (standard) mode:
`$.a.b`, `$.items[-1]`, `$.items[1:3]`, `$.items[*].name`, `$["key with spaces"]`, `$..name`
(descendants), `$.items[?@.price < 10]` (filters). The leading `$` may be left out: `a.b[0]`,
`.*` and `["k"]` mean `$.a.b[0]`, `$.*` and `$["k"]`, as before JSONPath. A singular query (only
names and indexes) returns the one value found, or null; any other returns the list of matches.
"""

from __future__ import annotations

import json
from typing import Any

from jsonpath import JSONPath, JSONPathEnvironment, JSONPathError

from bundles.sdk import JsonObject, JsonValue, ToolContext, ToolFailed
from protocol.errors import ErrorCode

MAX_PATH_CHARS = 1000
"""Longer paths are refused before parsing: a parser's recursion grows with the path."""
_JSONPATH = JSONPathEnvironment(strict=True)
_SYNTAX_HELP = (
    'Use JSONPath (RFC 9535): $.name, $["key with spaces"], $[0], $[-1], $[1:3], $[*], $..name, '
    "$[?@.price < 10]; the leading $ may be left out."
)


def to_jsonpath(path: str) -> str:
    """The JSONPath of a path in the older short form (`a.b[0]`, `.*`, `["k"]`); `$` or "" is
    the whole value. A path that starts with `$` is returned as it is."""
    text = path.strip()
    if text.startswith("$"):
        return text
    if not text or text.startswith((".", "[")):
        return "$" + text
    return "$." + text


def _first_line(error: Exception) -> str:
    return (str(error).splitlines() or [type(error).__name__])[0]


def _bad_path(path: str, why: str) -> ToolFailed:
    return ToolFailed(
        f"cannot use path {path!r}: {why}",
        code=ErrorCode.E_TOOL_QUERY_INVALID,
        suggestion=_SYNTAX_HELP,
    )


def compile_path(path: str) -> JSONPath:
    if len(path) > MAX_PATH_CHARS:
        raise _bad_path(path[:40] + "...", f"longer than {MAX_PATH_CHARS} characters")
    try:
        compiled = _JSONPATH.compile(to_jsonpath(path))
    except (JSONPathError, RecursionError) as error:  # RecursionError: nesting in the path
        raise _bad_path(path, _first_line(error)) from None
    assert isinstance(compiled, JSONPath)  # strict mode has no compound (| &) paths
    return compiled


def evaluate(data: Any, path: str) -> tuple[Any, bool]:
    """(result, found): the one value (or None) for a singular query, else the list of matches."""
    compiled = compile_path(path)
    try:
        values = compiled.findall(data)
    except (JSONPathError, RecursionError) as error:  # e.g. `..` over data nested too deeply
        raise _bad_path(path, _first_line(error)) from None
    if compiled.singular_query():
        return (values[0], True) if values else (None, False)
    return values, bool(values)


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
