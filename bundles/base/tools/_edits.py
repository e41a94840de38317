"""Pure text edits for file-system `edit` and `create`: exact, unambiguous replacements with
errors that say how to fix them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from bundles.sdk import ToolFailed
from protocol.errors import ErrorCode


def _positions(text: str, needle: str) -> list[int]:
    """Every start of `needle` in `text`, overlapping ones included (they are ambiguous too)."""
    found: list[int] = []
    start = text.find(needle)
    while start != -1:
        found.append(start)
        start = text.find(needle, start + 1)
    return found


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def unique_position(text: str, needle: str, *, what: str, where: str) -> int:
    """The one place `needle` occurs; a coded error naming 0 or N matches otherwise."""
    if not needle:
        raise ToolFailed(f"{what} must not be empty", code=ErrorCode.E_TOOL_INVALID_ARGS)
    found = _positions(text, needle)
    if len(found) == 1:
        return found[0]
    if not found:
        hint = "Copy the text exactly (indentation, tabs, trailing spaces) from file-system__read."
        if _squash(needle) and _squash(needle) in _squash(text):
            hint = "It matches if whitespace is ignored: " + hint
        raise ToolFailed(
            f"{what} was not found in {where} (0 matches)",
            code=ErrorCode.E_TOOL_EDIT_NO_MATCH,
            suggestion=hint,
        )
    lines = ", ".join(str(_line_of(text, i)) for i in found[:10])
    raise ToolFailed(
        f"{what} matches {len(found)} places in {where} (lines {lines}); it must match exactly one",
        code=ErrorCode.E_TOOL_EDIT_MULTIPLE_MATCHES,
        suggestion=f"Include more surrounding lines in {what} so that it is unique.",
    )


def replace_once(text: str, old: str, new: str, *, where: str) -> tuple[str, int]:
    """Replace the single occurrence of `old`; returns the new text and its line number."""
    at = unique_position(text, old, what="old_text", where=where)
    return text[:at] + new + text[at + len(old) :], _line_of(text, at)


def _as_lines(content: str) -> str:
    return content if content.endswith("\n") or not content else content + "\n"


def _apply(text: str, edit: dict[str, Any], label: str) -> str:
    kind = edit.get("type")
    content = str(edit.get("content", ""))
    if kind == "create":
        return content
    if kind == "append":
        return text + content
    if kind == "prepend":
        return content + text
    marker = edit.get("marker")
    if not isinstance(marker, str) or kind not in ("insert_after", "insert_before", "replace"):
        raise ToolFailed(
            f"{label}: type must be create, append, prepend, insert_after, insert_before or "
            "replace; the last three need a marker",
            code=ErrorCode.E_TOOL_INVALID_ARGS,
        )
    at = unique_position(text, marker, what=f"{label} marker", where="the file being built")
    if kind == "replace":
        return text[:at] + content + text[at + len(marker) :]
    if kind == "insert_before":
        line_start = text.rfind("\n", 0, at) + 1
        return text[:line_start] + _as_lines(content) + text[line_start:]
    line_end = text.find("\n", at + len(marker))
    if line_end == -1:  # the marker sits on a last line without a newline
        return text + "\n" + _as_lines(content)
    return text[: line_end + 1] + _as_lines(content) + text[line_end + 1 :]


def build(edits: Sequence[dict[str, Any]]) -> str:
    """The text produced by applying `edits` in order to an empty file."""
    text = ""
    for index, edit in enumerate(edits, start=1):
        text = _apply(text, edit, f"edit #{index} ({edit.get('type')})")
    return text
