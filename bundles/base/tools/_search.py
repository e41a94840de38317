"""Regex search over a workspace directory: ripgrep when it is on PATH, a Python walk otherwise.

Both engines agree on what they search: .gitignore/.ignore are honoured (also outside a git
repository), hidden files, binary files, files over the size limit and symlinks are skipped.
Both return `{path, line, text}` matches relative to the search directory, at most
`max_results`, and stop as soon as they have enough.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bundles.sdk import ToolFailed, load_sibling
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from bundles.base.tools import _ignore
else:
    _ignore = load_sibling(__file__, "_ignore")

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
    start: Path,
    query: str,
    glob: str | None,
    max_results: int,
    *,
    limit: int,
    timeout_s: float,
) -> SearchResult:
    argv = [rg, "--json", "--no-config", "--no-require-git", "--sort=path"]
    argv += [f"--max-filesize={limit}", *(["--glob", glob] if glob else [])]
    argv += ["--regexp", query, "--", "."]
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=start,
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
    matches.sort(key=lambda m: (m.path, m.line))
    return SearchResult(matches[:max_results], len(matches) > max_results, "ripgrep")


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


def _grep_file(path: Path, rel: str, regex: re.Pattern[str], limit: int) -> list[Match]:
    try:
        if path.stat().st_size > limit:
            return []
        data = path.read_bytes()
    except OSError:
        return []  # unreadable files are skipped, as ripgrep does
    if b"\x00" in data[:8192]:
        return []
    text = data.decode("utf-8", errors="replace")
    return [
        Match(rel, number, _clip(line))
        for number, line in enumerate(text.splitlines(), start=1)
        if regex.search(line)
    ]


def search_python(
    top: Path,
    start: Path,
    query: str,
    glob: str | None,
    max_results: int,
    *,
    limit: int,
    timeout_s: float,
) -> SearchResult:
    try:
        regex = re.compile(query)
    except re.error as error:
        raise _invalid_regex(query, str(error)) from None
    pattern = _file_glob(glob)
    deadline = time.monotonic() + timeout_s
    matches: list[Match] = []
    for path, rel in _ignore.walk_files(top, start):
        if time.monotonic() > deadline:
            raise _timeout(timeout_s)
        if wanted(pattern, rel):
            matches.extend(_grep_file(path, rel, regex, limit))
            if len(matches) > max_results:
                break
    return SearchResult(matches[:max_results], len(matches) > max_results, "python")


def find_files(top: Path, start: Path, glob: str, max_results: int) -> tuple[list[str], bool]:
    """Files under `start` whose relative path (or name, for a glob without `/`) matches."""
    pattern = _file_glob(glob)
    found: list[str] = []
    for _path, rel in _ignore.walk_files(top, start):
        if wanted(pattern, rel):
            found.append(rel)
            if len(found) > max_results:
                break
    return found[:max_results], len(found) > max_results
