"""Add or update one entry of `spec.dependencies` in a bundle's goondan.yaml as a text edit.

PyYAML does not keep comments, so `goondan package add` edits the lines of the Package
document (the first document of the file) and keeps everything else byte for byte: comments,
key order, the other documents. The result is parsed again and must equal the old data plus
the new dependency; anything this editor cannot handle safely (no Package document, a flow
`spec: {...}`, tabs, anchors and aliases, a multi-line flow mapping) is refused with
E_PACKAGE_EDIT naming the fix, and nothing is written.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from protocol.errors import ErrorCode

_SEPARATOR = re.compile(r"^(---|\.\.\.)(\s|$)")
_ANCHOR = re.compile(r"(^|[\s\[{,:-])[&*!][^\s]")
_KEY = re.compile(r"^(\s*)(\"[^\"]*\"|'[^']*'|[^\s#:'\"][^:#]*?)\s*:(\s|$)")


class EditError(Exception):
    """Why the file was not edited (E_PACKAGE_EDIT)."""

    code = ErrorCode.E_PACKAGE_EDIT


@dataclass(frozen=True, slots=True)
class _Key:
    line: int
    indent: int
    name: str
    rest: str
    """What follows the `key:` on its line (value and comment)."""


def _key(lines: list[str], index: int) -> _Key | None:
    text = lines[index]
    if not text.strip() or text.lstrip().startswith("#"):
        return None
    found = _KEY.match(text)
    if found is None:
        return None
    raw = found.group(2)
    name = raw[1:-1] if raw[:1] in "\"'" else raw.strip()
    return _Key(index, len(found.group(1)), name, text[found.end(2) :].lstrip()[1:].strip())


def _first_document(lines: list[str]) -> tuple[int, int]:
    """[start, end) of the first document's lines (after a leading `---`)."""
    start = 0
    while start < len(lines) and (not lines[start].strip() or lines[start].startswith("#")):
        start += 1
    if start < len(lines) and _SEPARATOR.match(lines[start]):
        start += 1
    end = start
    while end < len(lines) and not _SEPARATOR.match(lines[end]):
        end += 1
    return start, end


def _block_end(lines: list[str], key: _Key, end: int) -> int:
    """The line after the last one of `key`'s block (its more indented lines)."""
    last = key.line
    for i in range(key.line + 1, end):
        text = lines[i]
        if not text.strip() or text.lstrip().startswith("#"):
            continue
        if len(text) - len(text.lstrip(" ")) <= key.indent:
            break
        last = i
    return last + 1


def _children(lines: list[str], key: _Key, end: int) -> list[_Key]:
    found = [_key(lines, i) for i in range(key.line + 1, _block_end(lines, key, end))]
    keys = [k for k in found if k is not None]
    depth = min((k.indent for k in keys), default=None)
    return [k for k in keys if k.indent == depth]


def _entry(name: str, spec: object) -> str:
    """One `"name": value` line; the value as JSON (a string, null or a flow mapping)."""
    return f"{json.dumps(name)}: {json.dumps(spec)}"


def _child_indent(lines: list[str], parent: _Key, end: int, default: int) -> int:
    kids = _children(lines, parent, end)
    return kids[0].indent if kids else default


def _edit_flow(line: str, rest: str, name: str, spec: object) -> str:
    """`dependencies: {...}` on one line: the entry appended inside the braces."""
    value = rest.split(" #", 1)[0].strip()
    if not (value.startswith("{") and value.endswith("}")):
        raise EditError("spec.dependencies is neither a block nor a one-line {...} mapping")
    inner = value[1:-1].strip()
    if name in inner:
        raise EditError(f"{name} is already in the one-line spec.dependencies; edit it by hand")
    new = "{" + (f"{inner}, " if inner else "") + _entry(name, spec) + "}"
    return line.replace(value, new, 1)


def _set_dependency(lines: list[str], start: int, end: int, name: str, spec: object) -> None:
    top = [k for i in range(start, end) if (k := _key(lines, i)) is not None and k.indent == 0]
    spec_key = next((k for k in top if k.name == "spec"), None)
    if spec_key is None:
        lines.insert(end, f"spec:\n  dependencies:\n    {_entry(name, spec)}\n")
        return
    if spec_key.rest and not spec_key.rest.startswith("#"):
        raise EditError("the Package document's `spec:` is written inline; write it as a block")
    indent = _child_indent(lines, spec_key, end, 2)
    deps = next((k for k in _children(lines, spec_key, end) if k.name == "dependencies"), None)
    if deps is None:
        at = _block_end(lines, spec_key, end)
        pad = " " * indent
        lines.insert(at, f"{pad}dependencies:\n{pad}  {_entry(name, spec)}\n")
        return
    value = deps.rest.split("#", 1)[0].strip() if not deps.rest.startswith("{") else deps.rest
    if value in ("", "null", "~", "{}"):
        entries = _children(lines, deps, end)
        same = next((k for k in entries if k.name == name), None)
        pad = " " * _child_indent(lines, deps, end, deps.indent + 2)
        if value:  # `dependencies: {}` or null: a block from here on
            lines[deps.line] = " " * deps.indent + "dependencies:\n"
        if same is not None:
            kept = re.search(r"\s+#[^\"']*$", lines[same.line].rstrip("\n"))
            comment = kept.group(0) if kept else ""
            lines[same.line] = f"{pad}{_entry(name, spec)}{comment}\n"
        else:
            lines.insert(_block_end(lines, deps, end), f"{pad}{_entry(name, spec)}\n")
        return
    lines[deps.line] = _edit_flow(lines[deps.line], deps.rest, name, spec)


def _refuse_hostile(lines: list[str], start: int, end: int) -> None:
    for i in range(start, end):
        text = lines[i].split(" #", 1)[0] if not lines[i].lstrip().startswith("#") else ""
        if "\t" in lines[i]:
            raise EditError(f"line {i + 1} holds a tab; indent the Package document with spaces")
        if _ANCHOR.search(text) and not re.search(r"\"[^\"]*[&*!][^\"]*\"", text):
            raise EditError(
                f"line {i + 1} uses an anchor, alias or tag; write the Package document plainly"
            )


def add_dependency(text: str, name: str, spec: object) -> str:
    """`text` with `spec.dependencies[name] = spec` in its leading Package document."""
    try:
        before = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise EditError(f"the file does not parse: {exc}") from exc
    first = before[0] if before else None
    if not isinstance(first, dict) or first.get("kind") != "Package":
        raise EditError(
            "the bundle has no Package document; add one at the top of goondan.yaml "
            "(kind: Package, metadata: {name: my-bundle}) and run this again"
        )
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    start, end = _first_document(lines)
    _refuse_hostile(lines, start, end)
    _set_dependency(lines, start, end, name, spec)
    after_text = "".join(lines)
    _verify(before, after_text, name, spec)
    return after_text


def _verify(before: list[Any], text: str, name: str, spec: object) -> None:
    try:
        after = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise EditError("the edit would not parse; add the dependency by hand") from exc
    expected = [dict(d) if isinstance(d, dict) else d for d in before]
    package = dict(expected[0])
    old_spec = package.get("spec")
    new_spec = dict(old_spec) if isinstance(old_spec, dict) else {}
    deps = new_spec.get("dependencies")
    new_spec["dependencies"] = {**(deps if isinstance(deps, dict) else {}), name: spec}
    package["spec"] = new_spec
    expected[0] = package
    if after != expected:
        raise EditError("the edit would change more than spec.dependencies; add it by hand")


def write_atomically(path: Path, text: str) -> None:
    """A temporary file beside `path`, then a rename: a reader sees the old or the new file."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        mode = path.stat().st_mode & 0o777
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
