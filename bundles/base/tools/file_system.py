"""`file-system`: read, write, list, search and edit files inside the instance workspace.

Exports read, write, list, mkdir, search, find, edit, create, delete and move (the usual coding
tools). Every path goes through `_workspace`: `..`, absolute paths and symlinks leading outside
the workspace (or the Tool's `roots`) are refused with `E_TOOL_PATH_ESCAPE`; delete and move act
on a symlink itself, never on what it points to.

Settings (`Tool.spec.config`): `roots` (default: the workdir), `maxFileBytes` (largest file read
or written, default 10000000), `maxListEntries` (default 1000), `searchEngine` (`auto`,
`ripgrep` or `python`; default auto = ripgrep when on PATH), `searchTimeoutMs` (default 30000).
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bundles.sdk import JsonObject, ToolContext, ToolFailed, load_sibling
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from bundles.base.tools import _edits, _fileio, _search, _workspace
else:
    _edits = load_sibling(__file__, "_edits")
    _fileio = load_sibling(__file__, "_fileio")
    _search = load_sibling(__file__, "_search")
    _workspace = load_sibling(__file__, "_workspace")

DEFAULT_READ_BYTES = 100_000


def _setting(config: Mapping[str, Any], key: str, default: int) -> int:
    value = config.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ToolFailed(f"Tool config {key!r} must be a positive integer, got {value!r}")
    return value


def _ws(ctx: ToolContext) -> _workspace.Workspace:
    return _workspace.Workspace.from_context(ctx.workdir, ctx.config)


def _directory(ws: _workspace.Workspace, raw: str) -> Path:
    path = ws.resolve(raw)
    if not path.exists():
        raise _fileio.not_found(raw)
    if not path.is_dir():
        raise ToolFailed(f"{raw!r} is not a directory", code=ErrorCode.E_TOOL_PATH_WRONG_TYPE)
    return path


# -- read and write --------------------------------------------------------------------------


def _numbered(lines: list[str], first: int, max_bytes: int) -> tuple[str, int, bool]:
    """Lines as `%6d  text`, stopping before `max_bytes`; returns (text, last line, cut).

    A first line that alone is over the budget is shown cut (a minified file is one line)."""
    out: list[str] = []
    used = 0
    for offset, line in enumerate(lines):
        row = f"{first + offset:6d}  {line}\n"
        used += len(row.encode("utf-8"))
        if used > max_bytes:
            if not out:
                head = row.encode("utf-8")[:max_bytes].decode("utf-8", errors="ignore")
                return head.rstrip("\n") + "\n", first, True
            return "".join(out), first + offset - 1, True
        out.append(row)
    return "".join(out), first + len(lines) - 1, False


def read(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """Numbered lines `start`..`end` (1-based, inclusive) of a text file, up to `maxBytes`."""
    ws = _ws(ctx)
    raw = str(input["path"])
    text = _fileio.read_text(
        ws.resolve(raw), raw, limit=_setting(ctx.config, "maxFileBytes", 10**7)
    )
    lines = text.splitlines()
    start = int(input.get("start", 1))
    end = min(int(input.get("end", len(lines))), len(lines))
    if start > max(len(lines), 1) or (input.get("end") is not None and end < start):
        raise ToolFailed(
            f"line range {start}..{input.get('end', 'end')} is outside {raw!r} "
            f"({len(lines)} lines)",
            code=ErrorCode.E_TOOL_INVALID_ARGS,
        )
    max_bytes = int(input.get("maxBytes", DEFAULT_READ_BYTES))
    content, last, cut = _numbered(lines[start - 1 : end], start, max_bytes)
    result: JsonObject = {
        "path": raw,
        "content": content,
        "startLine": start,
        "endLine": last,
        "totalLines": len(lines),
        "truncated": cut,
    }
    if cut:
        result["nextStart"] = last + 1
    return result


def write(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """Create or replace a file (atomically), or append to it; parent directories are made."""
    ws = _ws(ctx)
    raw = str(input["path"])
    content = str(input["content"])
    limit = _setting(ctx.config, "maxFileBytes", 10**7)
    size = len(content.encode("utf-8"))
    if size > limit:
        raise _fileio.too_large("content", size, limit)
    path = ws.resolve(raw)
    if path.exists() and not path.is_file():
        raise ToolFailed(f"{raw!r} is not a regular file", code=ErrorCode.E_TOOL_PATH_WRONG_TYPE)
    created = not path.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    if input.get("append"):
        _fileio.append_text(path, content)
    else:
        _fileio.atomic_write(path, content)
    return {
        "path": ws.display(path),
        "bytesWritten": size,
        "created": created,
        "appended": bool(input.get("append")),
    }


# -- directories -----------------------------------------------------------------------------


def _entry(ws: _workspace.Workspace, path: Path) -> JsonObject:
    if path.is_symlink():
        return {"path": ws.display(path), "type": "symlink"}
    if path.is_dir():
        return {"path": ws.display(path), "type": "dir"}
    kind = "file" if path.is_file() else "other"
    return {"path": ws.display(path), "type": kind, "size": path.lstat().st_size}


def _children(target: Path, recursive: bool) -> Iterator[Path]:
    """Sorted, depth first; symlinked directories and .git are listed but not entered."""
    for child in sorted(target.iterdir()):
        yield child
        if recursive and child.is_dir() and not child.is_symlink() and child.name != ".git":
            yield from _children(child, recursive)


def list_(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """Entries of a directory (sorted), optionally recursive; symlinks are not followed."""
    ws = _ws(ctx)
    target = _directory(ws, str(input.get("path") or "."))
    want_dirs = input.get("includeDirs", True)
    want_files = input.get("includeFiles", True)
    cap = _setting(ctx.config, "maxListEntries", 1000)
    entries: list[JsonObject] = []
    truncated = False
    for child in _children(target, bool(input.get("recursive", False))):
        is_dir = child.is_dir() and not child.is_symlink()
        if (is_dir and not want_dirs) or (not is_dir and not want_files):
            continue
        if len(entries) == cap:
            truncated = True
            break
        entries.append(_entry(ws, child))
    return {"path": ws.display(target), "entries": entries, "truncated": truncated}


def mkdir(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """Create a directory; `recursive` also creates parents and accepts an existing one."""
    ws = _ws(ctx)
    raw = str(input["path"])
    path = ws.resolve(raw)
    recursive = bool(input.get("recursive", False))
    existed = path.is_dir()
    try:
        path.mkdir(parents=recursive, exist_ok=recursive)
    except FileExistsError:
        raise ToolFailed(
            f"{raw!r} already exists",
            code=ErrorCode.E_TOOL_PATH_EXISTS,
            suggestion="Pass recursive: true to accept an existing directory.",
        ) from None
    except FileNotFoundError:
        raise ToolFailed(
            f"the parent of {raw!r} does not exist",
            code=ErrorCode.E_TOOL_PATH_NOT_FOUND,
            suggestion="Pass recursive: true to create missing parents.",
        ) from None
    if not path.is_dir():
        raise ToolFailed(
            f"{raw!r} exists and is not a directory", code=ErrorCode.E_TOOL_PATH_EXISTS
        )
    return {"path": ws.display(path), "created": not existed}


# -- search and find -------------------------------------------------------------------------


def _engine(config: Mapping[str, Any]) -> str | None:
    """The ripgrep binary to use, or None for the Python fallback."""
    choice = config.get("searchEngine", "auto")
    rg = _search.ripgrep_path()
    if choice == "python":
        return None
    if choice == "ripgrep" and rg is None:
        raise ToolFailed("searchEngine is 'ripgrep' but rg is not on PATH")
    return rg


async def search(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """Regex search of file contents (gitignore-aware) under `path`, at most `maxResults`."""
    ws = _ws(ctx)
    start = _directory(ws, str(input.get("path") or "."))
    query, glob = str(input["query"]), input.get("glob")
    max_results = int(input.get("maxResults", 100))
    limit = _setting(ctx.config, "maxFileBytes", 10**7)
    timeout_s = _setting(ctx.config, "searchTimeoutMs", 30_000) / 1000
    rg = _engine(ctx.config)
    if rg is not None:
        found = await _search.search_ripgrep(
            rg, start, query, glob, max_results, limit=limit, timeout_s=timeout_s
        )
    else:
        found = await asyncio.to_thread(  # a long walk must not stall the agent's event loop
            _search.search_python,
            ws.root_of(start),
            start,
            query,
            glob,
            max_results,
            limit=limit,
            timeout_s=timeout_s,
        )
    matches = [
        {"path": ws.display(start / m.path), "line": m.line, "text": m.text} for m in found.matches
    ]
    return {
        "matches": matches,
        "count": len(matches),
        "truncated": found.truncated,
        "engine": found.engine,
    }


def find(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """Files whose name (or relative path, for a pattern with `/`) matches a glob."""
    ws = _ws(ctx)
    start = _directory(ws, str(input.get("path") or "."))
    files, truncated = _search.find_files(
        ws.root_of(start), start, str(input["pattern"]), int(input.get("maxResults", 1000))
    )
    shown = [ws.display(start / rel) for rel in files]
    return {"files": shown, "count": len(shown), "truncated": truncated}


# -- edit, create, delete, move --------------------------------------------------------------


def edit(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """Replace the one occurrence of `old_text` with `new_text` (0 or 2+ matches: an error)."""
    ws = _ws(ctx)
    raw = str(input["path"])
    path = ws.resolve(raw)
    text = _fileio.read_text(path, raw, limit=_setting(ctx.config, "maxFileBytes", 10**7))
    new_text, line = _edits.replace_once(
        text, str(input["old_text"]), str(input["new_text"]), where=repr(raw)
    )
    _fileio.atomic_write(path, new_text)
    return {"path": ws.display(path), "replacements": 1, "line": line}


def create(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """Build a new file from ordered edits and write it in one atomic step."""
    ws = _ws(ctx)
    raw = str(input["path"])
    path = ws.resolve(raw)
    overwrite = bool(input.get("overwrite", False))
    text = _edits.build(list(input["edits"]))
    limit = _setting(ctx.config, "maxFileBytes", 10**7)
    if len(text.encode("utf-8")) > limit:
        raise _fileio.too_large("the built file", len(text.encode("utf-8")), limit)
    exists = ToolFailed(
        f"{raw!r} already exists",
        code=ErrorCode.E_TOOL_PATH_EXISTS,
        suggestion="Pass overwrite: true to replace it, or use file-system__edit.",
    )
    if path.exists() and (not overwrite or not path.is_file()):
        raise exists
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        _fileio.atomic_write(path, text, exclusive=not overwrite)
    except FileExistsError:
        raise exists from None
    return {"path": ws.display(path), "bytesWritten": len(text.encode("utf-8")), "created": True}


def delete(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """Delete a file or symlink; a directory needs `recursive` unless it is empty."""
    ws = _ws(ctx)
    raw = str(input["path"])
    path = ws.resolve_entry(raw)
    if path.is_symlink() or path.is_file():
        kind = "symlink" if path.is_symlink() else "file"
        path.unlink()
    elif path.is_dir():
        kind = "directory"
        if input.get("recursive"):
            shutil.rmtree(path)
        elif any(path.iterdir()):
            raise ToolFailed(
                f"directory {raw!r} is not empty",
                code=ErrorCode.E_TOOL_INVALID_ARGS,
                suggestion="Pass recursive: true to delete it with its contents.",
            )
        else:
            path.rmdir()
    else:
        raise _fileio.not_found(raw)
    return {"path": ws.display(path), "deleted": kind}


def move(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """Move or rename a file, directory or symlink to the exact path `destination`."""
    ws = _ws(ctx)
    source = ws.resolve_entry(str(input["source"]))
    destination = ws.resolve_entry(str(input["destination"]))
    if not os.path.lexists(source):
        raise _fileio.not_found(str(input["source"]))
    replaceable = input.get("overwrite") and source.is_file() and destination.is_file()
    if os.path.lexists(destination) and not replaceable:
        raise ToolFailed(
            f"{input['destination']!r} already exists",
            code=ErrorCode.E_TOOL_PATH_EXISTS,
            suggestion="Pick another name, or pass overwrite: true to replace a file.",
        )
    if source.is_dir() and not source.is_symlink() and destination.is_relative_to(source):
        raise ToolFailed(
            f"cannot move the directory {input['source']!r} into itself ({input['destination']!r})",
            code=ErrorCode.E_TOOL,
            suggestion="Pick a destination outside the directory being moved.",
        )
    destination.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(source, destination)  # rename(2), or copy + delete across file systems
    return {"source": ws.display(source), "destination": ws.display(destination)}


handlers = {
    name: _fileio.guard_os_errors(fn)
    for name, fn in {
        "read": read,
        "write": write,
        "list": list_,
        "mkdir": mkdir,
        "search": search,
        "find": find,
        "edit": edit,
        "create": create,
        "delete": delete,
        "move": move,
    }.items()
}
