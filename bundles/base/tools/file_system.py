"""`file-system`: read, write, list, search and edit files inside the instance workspace.

Exports read, write, list, mkdir, search, find, edit, create, delete and move (the usual coding
tools). Every path goes through `_workspace`: `..`, absolute paths and symlinks leading outside
the workspace (or the Tool's `roots`) are refused with `E_TOOL_PATH_ESCAPE`; delete and move act
on a symlink itself, never on what it points to. Paths are resolved once, beneath a root's file
descriptor, and the operation works on the fds it got (`_beneath`), so swapping a directory for
a symlink meanwhile cannot redirect it outside; files with several hard links are not read,
appended to or edited (`E_TOOL_HARD_LINK`, see `_fileio`).

Settings (`Tool.spec.config`): `roots` (default: the workdir), `maxFileBytes` (largest file read
or written, default 10000000), `maxListEntries` (default 1000), `searchEngine` (`auto`,
`ripgrep` or `python`; default auto = ripgrep when on PATH), `searchTimeoutMs` (default 30000).
"""

from __future__ import annotations

import asyncio
import functools
import os
import stat
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from bundles.sdk import JsonObject, ToolContext, ToolFailed, load_sibling
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from bundles.base.tools import _edits, _fileio, _fstree, _sandbox, _search, _workspace
else:
    _edits = load_sibling(__file__, "_edits")
    _fileio = load_sibling(__file__, "_fileio")
    _fstree = load_sibling(__file__, "_fstree")
    _sandbox = load_sibling(__file__, "_sandbox")
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
    raw = str(input["path"])
    with _ws(ctx) as ws:
        fd = ws.open_file(raw, _fileio.READ_FLAGS)
        try:
            text = _fileio.read_fd(fd, raw, limit=_setting(ctx.config, "maxFileBytes", 10**7))
        finally:
            os.close(fd)
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
    raw = str(input["path"])
    content = str(input["content"])
    limit = _setting(ctx.config, "maxFileBytes", 10**7)
    size = len(content.encode("utf-8"))
    if size > limit:
        raise _fileio.too_large("content", size, limit)
    with _ws(ctx) as ws:
        found = ws.entry(raw, follow_last=True, make_dirs=True)
        try:
            current = _fileio.lstat_entry(found)
            if current is not None and not stat.S_ISREG(current.st_mode):
                raise _fileio.wrong_type(raw)
            if input.get("append"):
                _fileio.append_text(found, content, raw)
            else:
                _fileio.atomic_write(found, content)
        finally:
            os.close(found.dir_fd)
        shown = ws.display(ws.absolute(raw))
    return {
        "path": shown,
        "bytesWritten": size,
        "created": current is None,
        "appended": bool(input.get("append")),
    }


# -- directories -----------------------------------------------------------------------------


def list_(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """Entries of a directory (sorted), optionally recursive; symlinks are not followed."""
    raw = str(input.get("path") or ".")
    cap = _setting(ctx.config, "maxListEntries", 1000)
    with _ws(ctx) as ws:
        shown = ws.absolute(raw)
        fd = ws.open_dir(raw)
        try:
            entries, truncated = _fstree.list_entries(
                fd,
                recursive=bool(input.get("recursive", False)),
                dirs=bool(input.get("includeDirs", True)),
                files=bool(input.get("includeFiles", True)),
                cap=cap,
            )
        finally:
            os.close(fd)
        listed: list[JsonObject] = []
        for entry in entries:
            item: JsonObject = {"path": ws.display(f"{shown}/{entry.rel}"), "type": entry.kind}
            if entry.size is not None:
                item["size"] = entry.size
            listed.append(item)
        return {"path": ws.display(shown), "entries": listed, "truncated": truncated}


def mkdir(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """Create a directory; `recursive` also creates parents and accepts an existing one."""
    raw = str(input["path"])
    recursive = bool(input.get("recursive", False))
    with _ws(ctx) as ws:
        try:
            found = ws.entry(raw, follow_last=True, make_dirs=recursive)
        except ToolFailed as error:
            if error.code != ErrorCode.E_TOOL_PATH_NOT_FOUND:
                raise
            raise ToolFailed(
                f"the parent of {raw!r} does not exist",
                code=ErrorCode.E_TOOL_PATH_NOT_FOUND,
                suggestion="Pass recursive: true to create missing parents.",
            ) from None
        try:
            created = _fstree.make_dir(found, raw, exist_ok=recursive)
        finally:
            os.close(found.dir_fd)
        return {"path": ws.display(ws.absolute(raw)), "created": created}


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


Confine = Callable[[list[str]], list[str]]


async def _ripgrep(
    ctx: ToolContext, ws: _workspace.Workspace, raw: str
) -> tuple[str, Confine | None] | None:
    """ripgrep and the Tool's sandbox it runs in (the roots read-only), or None for the
    Python engine: asked for, or `auto` where neither ripgrep nor a sandbox is at hand (the
    Python engine starts no process)."""
    rg = _engine(ctx.config)
    box = _sandbox.settings(ctx.config)
    if rg is None or box is None:
        return None if rg is None else (rg, None)
    try:
        bwrap = await _sandbox.bubblewrap()
    except ToolFailed:
        if ctx.config.get("searchEngine", "auto") == "ripgrep":
            raise
        return None
    cwd = str(ws.resolve(raw))
    roots = _sandbox.checked_roots(ctx.workdir, ctx.config, ws.roots)
    return rg, functools.partial(_sandbox.wrap, bwrap, box, roots=roots, cwd=cwd, read_only=True)


async def search(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """Regex search of file contents (gitignore-aware) under `path`, at most `maxResults`."""
    raw = str(input.get("path") or ".")
    query, glob = str(input["query"]), input.get("glob")
    max_results = int(input.get("maxResults", 100))
    limit = _setting(ctx.config, "maxFileBytes", 10**7)
    timeout_s = _setting(ctx.config, "searchTimeoutMs", 30_000) / 1000
    with _ws(ctx) as ws:
        shown = ws.absolute(raw)
        start = ws.open_dir(raw)
        try:
            ripgrep = await _ripgrep(ctx, ws, raw)
            if ripgrep is not None:
                found = await _search.search_ripgrep(
                    ripgrep[0], start, query, glob, max_results,
                    limit=limit, timeout_s=timeout_s, confine=ripgrep[1],
                )  # fmt: skip
            else:
                real = ws.resolve(raw)  # the walk's path, for ignore rules; reads go by fd
                found = await asyncio.to_thread(  # a long walk must not stall the event loop
                    _search.search_python,
                    ws.root_of(real),
                    (real, start),
                    query,
                    glob,
                    max_results,
                    limit=limit,
                    timeout_s=timeout_s,
                )
        finally:
            os.close(start)
        matches = [
            {"path": ws.display(f"{shown}/{m.path}"), "line": m.line, "text": m.text}
            for m in found.matches
        ]
    return {
        "matches": matches,
        "count": len(matches),
        "truncated": found.truncated,
        "engine": found.engine,
    }


def find(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """Files whose name (or relative path, for a pattern with `/`) matches a glob."""
    raw = str(input.get("path") or ".")
    with _ws(ctx) as ws:
        shown = ws.absolute(raw)
        start = ws.open_dir(raw)
        try:
            real = ws.resolve(raw)  # the walk's path, for ignore rules; each file is checked
            files, truncated = _search.find_files(
                ws.root_of(real),
                (real, start),
                str(input["pattern"]),
                int(input.get("maxResults", 1000)),
            )
        finally:
            os.close(start)
        listed = [ws.display(f"{shown}/{rel}") for rel in files]
    return {"files": listed, "count": len(listed), "truncated": truncated}


# -- edit, create, delete, move --------------------------------------------------------------


def edit(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """Replace the one occurrence of `old_text` with `new_text` (0 or 2+ matches: an error)."""
    raw = str(input["path"])
    with _ws(ctx) as ws:
        found = ws.entry(raw, follow_last=True)
        try:
            limit = _setting(ctx.config, "maxFileBytes", 10**7)
            text = _fileio.read_entry(found, raw, limit=limit)
            new_text, line = _edits.replace_once(
                text, str(input["old_text"]), str(input["new_text"]), where=repr(raw)
            )
            _fileio.atomic_write(found, new_text)
        finally:
            os.close(found.dir_fd)
        return {"path": ws.display(ws.absolute(raw)), "replacements": 1, "line": line}


def create(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """Build a new file from ordered edits and write it in one atomic step."""
    raw = str(input["path"])
    overwrite = bool(input.get("overwrite", False))
    text = _edits.build(list(input["edits"]))
    size = len(text.encode("utf-8"))
    limit = _setting(ctx.config, "maxFileBytes", 10**7)
    if size > limit:
        raise _fileio.too_large("the built file", size, limit)
    exists = ToolFailed(
        f"{raw!r} already exists",
        code=ErrorCode.E_TOOL_PATH_EXISTS,
        suggestion="Pass overwrite: true to replace it, or use file-system__edit.",
    )
    with _ws(ctx) as ws:
        found = ws.entry(raw, follow_last=True, make_dirs=True)
        try:
            current = _fileio.lstat_entry(found)
            if current is not None and (not overwrite or not stat.S_ISREG(current.st_mode)):
                raise exists
            try:
                _fileio.atomic_write(found, text, exclusive=not overwrite)
            except FileExistsError:
                raise exists from None
        finally:
            os.close(found.dir_fd)
        return {"path": ws.display(ws.absolute(raw)), "bytesWritten": size, "created": True}


def delete(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """Delete a file or symlink; a directory needs `recursive` unless it is empty."""
    raw = str(input["path"])
    with _ws(ctx) as ws:
        found = ws.entry(raw, follow_last=False)
        try:
            kind = _fstree.remove(found, raw, recursive=bool(input.get("recursive")))
        finally:
            os.close(found.dir_fd)
        return {"path": ws.display(ws.absolute(raw)), "deleted": kind}


def move(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """Move or rename a file, directory or symlink to the exact path `destination`."""
    source_raw, destination_raw = str(input["source"]), str(input["destination"])
    with _ws(ctx) as ws:
        source = ws.entry(source_raw, follow_last=False)
        try:
            overwrite = bool(input.get("overwrite"))
            _fstree.move(ws, source, source_raw, destination_raw, overwrite=overwrite)
        finally:
            os.close(source.dir_fd)
        return {
            "source": ws.display(ws.absolute(source_raw)),
            "destination": ws.display(ws.absolute(destination_raw)),
        }


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
