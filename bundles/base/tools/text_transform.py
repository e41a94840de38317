"""`text-transform`: small, exact text operations the model would otherwise get wrong.

Exports `replace`, `slice`, `split`, `join`, `trim` and `case`. Inputs are capped at
`maxTextChars` (Tool config, default 1000000) characters. Regular expressions use Python syntax;
an invalid one is `E_TOOL_QUERY_INVALID`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from bundles.sdk import JsonObject, ToolContext, ToolFailed
from protocol.errors import ErrorCode

DEFAULT_MAX_CHARS = 1_000_000
_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def _text(ctx: ToolContext, input: JsonObject, key: str = "text") -> str:
    text = str(input[key])
    limit = ctx.config.get("maxTextChars", DEFAULT_MAX_CHARS)
    if len(text) > limit:
        raise ToolFailed(
            f"{key} has {len(text)} characters, over the limit of {limit}",
            code=ErrorCode.E_TOOL_INVALID_ARGS,
            suggestion="Process the text in parts, or use bash__exec with sed/awk.",
        )
    return text


def _compile(pattern: str, flags: int = 0) -> re.Pattern[str]:
    try:
        return re.compile(pattern, flags)
    except re.error as error:
        raise ToolFailed(
            f"{pattern!r} is not a valid regular expression: {error}",
            code=ErrorCode.E_TOOL_QUERY_INVALID,
            suggestion="Escape special characters, or pass regex: false for a literal match.",
        ) from None


def replace(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """Replace `find` with `replacement` (all occurrences, or the first `count`)."""
    text = _text(ctx, input)
    find = str(input["find"])
    if not find:
        raise ToolFailed("find must not be empty", code=ErrorCode.E_TOOL_INVALID_ARGS)
    replacement = str(input.get("replacement", ""))
    flags = re.IGNORECASE if input.get("ignoreCase") else 0
    if input.get("regex"):
        pattern, template = _compile(find, flags), replacement
    else:  # literal on both sides: escaped backslashes leave no group references
        pattern, template = _compile(re.escape(find), flags), replacement.replace("\\", "\\\\")
    try:
        result, n = pattern.subn(template, text, count=int(input.get("count", 0)))
    except (re.error, IndexError) as error:
        raise ToolFailed(
            f"bad replacement {replacement!r}: {error}", code=ErrorCode.E_TOOL_QUERY_INVALID
        ) from None
    return {"text": result, "replacements": n}


def _index(value: Any) -> int | None:
    return None if value is None else int(value)


def slice_(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """Characters (or lines, with unit: lines) `start`..`end`, Python-style (0-based, end
    exclusive, negatives count from the end)."""
    text = _text(ctx, input)
    # JSON Schema's "integer" accepts 3.0 (json.loads gives a float): slice with ints
    start, end = _index(input.get("start")), _index(input.get("end"))
    if input.get("unit") == "lines":
        lines = text.splitlines(keepends=True)
        return {"text": "".join(lines[start:end]), "total": len(lines)}
    return {"text": text[start:end], "total": len(text)}


def split(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """Split on `separator` (a literal or a regex; default: runs of whitespace)."""
    text = _text(ctx, input)
    separator = input.get("separator")
    max_split = int(input.get("maxSplit", -1))
    parts: list[str]
    if separator is None or separator == "":
        parts = text.split(maxsplit=max_split)
    elif input.get("regex"):
        parts = _compile(str(separator)).split(text, maxsplit=max(max_split, 0))
    else:
        parts = text.split(str(separator), max_split)
    if input.get("trim"):
        parts = [p.strip() for p in parts]
    if input.get("removeEmpty"):
        parts = [p for p in parts if p]
    return {"parts": parts, "count": len(parts)}


def join(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """Join `parts` with `separator` (default: nothing)."""
    parts = [str(p) for p in input["parts"]]
    return {"text": _text(ctx, {"text": str(input.get("separator", "")).join(parts)})}


def trim(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """Strip whitespace (or `characters`) from both ends, or only the start or end."""
    text = _text(ctx, input)
    chars = input.get("characters")
    side = input.get("side", "both")
    strip = {"both": str.strip, "start": str.lstrip, "end": str.rstrip}[side]
    return {"text": strip(text, chars)}


def _words(text: str) -> list[str]:
    chunks = re.split(r"[\W_]+", text)
    return [w for chunk in chunks for w in _HUMP.split(chunk) if w]


_CASES: dict[str, Callable[[str], str]] = {
    "upper": str.upper,
    "lower": str.lower,
    "title": str.title,
    "capitalize": str.capitalize,
    "swapcase": str.swapcase,
    "snake": lambda t: "_".join(w.lower() for w in _words(t)),
    "kebab": lambda t: "-".join(w.lower() for w in _words(t)),
    "constant": lambda t: "_".join(w.upper() for w in _words(t)),
    "pascal": lambda t: "".join(w[:1].upper() + w[1:].lower() for w in _words(t)),
    "camel": lambda t: (lambda p: p[:1].lower() + p[1:])(_CASES["pascal"](t)),
}
CASE_NAMES = tuple(_CASES)


def case(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """Change letter case, or re-case identifiers (snake, kebab, camel, pascal, constant)."""
    text = _text(ctx, input)
    convert: Callable[[str], Any] = _CASES[str(input["to"])]
    return {"text": convert(text)}


handlers = {
    "replace": replace,
    "slice": slice_,
    "split": split,
    "join": join,
    "trim": trim,
    "case": case,
}
