"""Regex search over a workspace directory: ripgrep when it is on PATH, a Python walk otherwise.

Both engines agree on what they search: .gitignore/.ignore are honoured (also outside a git
repository), hidden files, binary files, files over the size limit and symlinks are skipped.
Both return `{path, line, text}` matches relative to the search directory, at most
`max_results`, and stop as soon as they have enough.

Neither reads a file outside the search directory, even while its tree is being changed under
it: the directory comes as an fd (ripgrep runs in it through /proc/self/fd and follows no
symlinks); the Python engine reads each file by an fd opened beneath it with no symlink on the
way (`_beneath.open_no_symlinks`); every ripgrep match is confirmed the same way (the file,
reached without symlinks, has that line), since ripgrep opens files by path. Files with more
than one hard link are skipped: their other name may lie outside (see `_fileio`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import stat
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bundles.sdk import ToolFailed, load_sibling
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from bundles.base.tools import _beneath, _ignore, _process
else:
    _beneath = load_sibling(__file__, "_beneath")
    _ignore = load_sibling(__file__, "_ignore")
    _process = load_sibling(__file__, "_process")

MAX_LINE_CHARS = 500
_RG_LINE_LIMIT = 16 * 1024 * 1024  # one JSON line holds a whole matched line


@dataclass(frozen=True, slots=True)
class Match:
    path: str
    line: int
    text: str


@dataclass(frozen=True, slots=True)
class SearchResult:
    matches: list[Match]
    truncated: bool
    engine: str


def _clip(line: str) -> str:
    line = line.rstrip("\r\n")
    return line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + "..."


def _invalid_regex(query: str, why: str) -> ToolFailed:
    return ToolFailed(
        f"query {query!r} is not a valid regular expression: {why}",
        code=ErrorCode.E_TOOL_QUERY_INVALID,
        suggestion="Escape special characters (e.g. \\( \\[ \\.) or search for plain words.",
    )


def _timeout(seconds: float) -> ToolFailed:
    return ToolFailed(
        f"search took longer than {seconds:g} s",
        code=ErrorCode.E_TOOL_TIMEOUT,
        suggestion="Narrow it with `path` or `glob`.",
    )


def ripgrep_path() -> str | None:
    return shutil.which("rg")


def _rg_match(line: bytes) -> Match | None:
    message = json.loads(line)
    if message.get("type") != "match":
        return None
    data = message["data"]
    path, text = data["path"].get("text"), data["lines"].get("text")
    if path is None or text is None:  # non-UTF-8 names or lines come base64-encoded: skip
        return None
    return Match(path.removeprefix("./"), int(data["line_number"]), _clip(text))


async def _rg_collect(proc: asyncio.subprocess.Process, max_results: int) -> list[Match]:
    assert proc.stdout is not None
    matches: list[Match] = []
    while len(matches) <= max_results and (line := await proc.stdout.readline()):
        if (match := _rg_match(line)) is not None:
            matches.append(match)
    return matches


async def search_ripgrep(
    rg: str,
    start: int,
    query: str,
    glob: str | None,
    max_results: int,
    *,
    limit: int,
    timeout_s: float,
    confine: Callable[[list[str]], list[str]] | None = None,
) -> SearchResult:
    """ripgrep in the directory `start` (an fd); matches it cannot confirm are dropped.

    With `confine` (the Tool's sandbox, `_sandbox.wrap` of the directory's name) ripgrep runs
    in the sandbox, in the directory by its name: the fd stays out (an fd opened outside is a
    way out of the sandbox's mounts), so a directory swapped in between is searched instead,
    and its matches are dropped by the same confirmation beneath `start`."""
    argv = [rg, "--json", "--no-config", "--no-follow", "--no-require-git", "--sort=path"]
    argv += [f"--max-filesize={limit}", *(["--glob", glob] if glob else [])]
    # argv cannot hold a NUL byte; the regex escape means the same to ripgrep
    argv += ["--regexp", query.replace("\x00", "\\x00"), "--", "."]
    _process.refuse_nul(argv)
    where: dict[str, Any] = {"cwd": f"/proc/self/fd/{start}", "pass_fds": (start,)}
    if confine is not None:  # bubblewrap exits as ripgrep does; killing it ends the sandbox
        argv, where = confine(argv), {}
    proc = await asyncio.create_subprocess_exec(
        *argv,
        **where,  # unconfined: the child's own copy of the fd, no path to swap
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        limit=_RG_LINE_LIMIT,
    )
    assert proc.stderr is not None
    errors = asyncio.ensure_future(proc.stderr.read())  # drained alongside: it must not fill up
    returncode: int | None = None
    try:
        async with asyncio.timeout(timeout_s):
            matches = await _rg_collect(proc, max_results)
            if len(matches) <= max_results:  # rg ran to its end: its exit status matters
                returncode = await proc.wait()
    except TimeoutError:
        raise _timeout(timeout_s) from None
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()  # enough results, or a timeout: stop rg rather than drain it
            await proc.wait()
        stderr = (await errors).decode("utf-8", errors="replace")
    if returncode == 2 and not matches and "regex" in stderr:
        raise _invalid_regex(query, stderr.strip().splitlines()[-1] if stderr.strip() else "")
    truncated = len(matches) > max_results
    matches = await asyncio.to_thread(_confirmed, start, matches[: max_results + 1], limit)
    matches.sort(key=lambda m: (m.path, m.line))
    return SearchResult(matches[:max_results], truncated, "ripgrep")


def _read_beneath(start: int, rel: str, limit: int) -> bytes | None:
    """The bytes of `rel` if it is a regular file with one link, under `limit` bytes, reached
    beneath `start` through no symlink; None otherwise (skipped, as ripgrep skips)."""
    try:
        fd = _beneath.open_no_symlinks(start, rel, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except (OSError, _beneath.Escape):
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1 or st.st_size > limit:
            return None
        with os.fdopen(os.dup(fd), "rb") as handle:
            data = handle.read(limit + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) <= limit else None


def _confirmed(start: int, matches: list[Match], limit: int) -> list[Match]:
    """The matches whose file, read beneath `start`, has that text on that line."""
    lines: dict[str, list[bytes] | None] = {}
    kept: list[Match] = []
    for match in matches:
        if match.path not in lines:
            data = _read_beneath(start, match.path, limit)
            lines[match.path] = None if data is None else data.split(b"\n")
        found = lines[match.path]
        if found is None or not 0 < match.line <= len(found):
            continue
        if _clip(found[match.line - 1].decode("utf-8", errors="replace")) == match.text:
            kept.append(match)
    return kept


_GLOB_HELP = "Use gitignore-style globs: *, ?, [abc], ** and {a,b}; `!glob` excludes."


def _file_glob(glob: str | None) -> _ignore.Pattern | None:
    if not glob:
        return None
    try:
        pattern = _ignore.compile_pattern(glob)
    except _ignore.InvalidPattern as error:
        raise ToolFailed(
            f"invalid glob: {error}", code=ErrorCode.E_TOOL_INVALID_ARGS, suggestion=_GLOB_HELP
        ) from None
    if pattern is None:
        raise ToolFailed(
            f"glob {glob!r} is empty", code=ErrorCode.E_TOOL_INVALID_ARGS, suggestion=_GLOB_HELP
        )
    return pattern


def wanted(pattern: _ignore.Pattern | None, rel: str) -> bool:
    """Does a file pass the user's glob? (`!glob` excludes what it matches.)"""
    return pattern is None or pattern.wanted(rel)


def _grep_file(start: int, rel: str, regex: re.Pattern[str], limit: int) -> list[Match]:
    data = _read_beneath(start, rel, limit)
    if data is None or b"\x00" in data[:8192]:
        return []
    text = data.decode("utf-8", errors="replace")
    return [
        Match(rel, number, _clip(line))
        for number, line in enumerate(text.splitlines(), start=1)
        if regex.search(line)
    ]


def search_python(
    top: Path,
    start: tuple[Path, int],
    query: str,
    glob: str | None,
    max_results: int,
    *,
    limit: int,
    timeout_s: float,
) -> SearchResult:
    """The walk goes by `start`'s path (for the ignore rules); each file is read by its fd."""
    try:
        regex = re.compile(query)
    except re.error as error:
        raise _invalid_regex(query, str(error)) from None
    pattern = _file_glob(glob)
    deadline = time.monotonic() + timeout_s
    matches: list[Match] = []
    for _path, rel in _ignore.walk_files(top, start[0]):
        if time.monotonic() > deadline:
            raise _timeout(timeout_s)
        if wanted(pattern, rel):
            matches.extend(_grep_file(start[1], rel, regex, limit))
            if len(matches) > max_results:
                break
    return SearchResult(matches[:max_results], len(matches) > max_results, "python")


def _is_file_beneath(start: int, rel: str) -> bool:
    try:
        fd = _beneath.open_no_symlinks(start, rel, os.O_PATH)
    except (OSError, _beneath.Escape):
        return False
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode)
    finally:
        os.close(fd)


def find_files(
    top: Path, start: tuple[Path, int], glob: str, max_results: int
) -> tuple[list[str], bool]:
    """Files under `start` whose relative path (or name, for a glob without `/`) matches;
    each one confirmed to be a file beneath `start`'s fd, reached through no symlink."""
    pattern = _file_glob(glob)
    found: list[str] = []
    for _path, rel in _ignore.walk_files(top, start[0]):
        if wanted(pattern, rel) and _is_file_beneath(start[1], rel):
            found.append(rel)
            if len(found) > max_results:
                break
    return found[:max_results], len(found) > max_results
