"""file-system against a tree that changes under it, and hard links to outside files.

Every test runs twice: with openat2(RESOLVE_BENEATH) where the kernel has it, and with the
O_NOFOLLOW walk that replaces it elsewhere (forced by making the probe say no).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from bundles.sdk import ToolFailed

from .conftest import FakeContext
from .test_file_system import CALLS, ESCAPES, failure, fs, run


def _beneath() -> Any:
    """The helper exactly as file_system loaded it (looked up late, so that these tests run,
    and fail, against a file_system without it)."""
    return fs._workspace._beneath


RENAME_EXCHANGE = 2
AT_FDCWD = -100
SECRET = "OUTSIDE SECRET"


@pytest.fixture(params=["openat2", "walk"])
def resolver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    mode: str = request.param
    if mode == "walk":
        monkeypatch.setattr(_beneath(), "openat2_available", lambda: False)
    elif not _beneath().openat2_available():
        pytest.skip("this kernel has no openat2 (Linux < 5.6) or a seccomp filter hides it")
    return mode


def snapshot(root: Path) -> dict[str, bytes | str]:
    """Every entry under `root` with its content (files) or target (symlinks)."""
    out: dict[str, bytes | str] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            out[rel] = "-> " + os.readlink(path)
        elif path.is_file():
            out[rel] = path.read_bytes()
        else:
            out[rel] = "dir"
    return out


def contents(path: Path) -> tuple[str, int]:
    """(text, number of hard links) of a file."""
    return path.read_text(), path.stat().st_nlink


# -- the race: a checked directory swapped for a symlink to outside ------------------------


def _renameat2() -> Any:
    libc = ctypes.CDLL(None, use_errno=True)
    call = libc.renameat2
    call.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return call


@dataclass
class Swapper:
    """A thread that exchanges `a` and `b` (a directory and a symlink) as fast as it can."""

    a: Path
    b: Path
    stop: threading.Event = field(default_factory=threading.Event)
    swaps: int = 0

    def run(self) -> None:
        exchange = _renameat2()
        a, b = os.fsencode(self.a), os.fsencode(self.b)
        while not self.stop.is_set():
            if exchange(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) != 0:
                raise OSError(ctypes.get_errno(), "renameat2(RENAME_EXCHANGE) failed")
            self.swaps += 1


@pytest.fixture
def swapped(workdir: Path) -> Iterator[Swapper]:
    """work/dir (a directory) and work/swap (a symlink to outside/dir) trade places."""
    outside = workdir.parent / "outside" / "dir"
    outside.mkdir()
    (outside / "f.txt").write_text(SECRET + "\n")
    (outside / "only-outside.txt").write_text(SECRET + "\n")
    (workdir / "dir").mkdir()
    (workdir / "dir" / "f.txt").write_text("inside\n")
    (workdir / "swap").symlink_to(outside)
    swapper = Swapper(workdir / "dir", workdir / "swap")
    thread = threading.Thread(target=swapper.run, daemon=True)
    thread.start()
    try:
        yield swapper
    finally:
        swapper.stop.set()
        thread.join(10)


ROUNDS = 75
"""Rounds of 13 calls each while the swapper runs flat out on a core of its own (tens of
thousands of swaps per test). Was 150: these four tests took a seventh of the unit suite's CPU.
At 75, `open_no_symlinks` replaced by a plain os.open that follows links fails three of the
four in each of two runs tried."""


async def attempt(ctx: FakeContext, export: str, args: dict[str, Any]) -> Any:
    """One call during the race: its result, or None when the tool refused (any coded error:
    which one depends on where the swap caught it; anything else propagates)."""
    try:
        return await run(ctx, export, args)
    except ToolFailed:
        return None


ENGINES = [
    pytest.param(
        "ripgrep",
        marks=pytest.mark.skipif(shutil.which("rg") is None, reason="ripgrep is not on PATH"),
    ),
    "python",
]


@pytest.mark.parametrize("engine", ENGINES)
async def test_swapping_a_directory_for_a_symlink_never_reaches_outside(
    ctx: FakeContext, workdir: Path, swapped: Swapper, resolver: str, engine: str
) -> None:
    outside = workdir.parent / "outside"
    before = snapshot(outside)
    ctx = replace(ctx, config={"searchEngine": engine})
    seen: list[str] = []
    for i in range(ROUNDS):
        await attempt(ctx, "write", {"path": "dir/f.txt", "content": f"inside {i}\n"})
        if (out := await attempt(ctx, "read", {"path": "dir/f.txt"})) is not None:
            seen.append(out["content"])
        await attempt(ctx, "edit", {"path": "dir/f.txt", "old_text": f"{i}", "new_text": "x"})
        await attempt(ctx, "write", {"path": "dir/f.txt", "content": "more\n", "append": True})
        await attempt(ctx, "write", {"path": f"dir/w{i}.txt", "content": "w"})
        edits = [{"type": "create", "content": "c"}]
        await attempt(ctx, "create", {"path": f"dir/c{i}.txt", "edits": edits})
        await attempt(ctx, "mkdir", {"path": f"dir/m{i}"})
        await attempt(ctx, "move", {"source": f"dir/w{i}.txt", "destination": f"dir/v{i}.txt"})
        await attempt(ctx, "delete", {"path": f"dir/c{i}.txt"})
        if (out := await attempt(ctx, "list", {"path": "dir"})) is not None:
            seen.extend(entry["path"] for entry in out["entries"])
        for where in ("dir", "."):  # the swap is the search's start, or lies beneath it
            query = {"query": "SECRET|inside", "path": where}
            if (out := await attempt(ctx, "search", query)) is not None:
                seen.extend(match["text"] for match in out["matches"])
            if (out := await attempt(ctx, "find", {"pattern": "*", "path": where})) is not None:
                seen.extend(out["files"])
    swapped.stop.set()
    assert swapped.swaps > ROUNDS  # the tree really changed under every round
    assert not [s for s in seen if SECRET in s or "only-outside" in s], "read outside"
    assert snapshot(outside) == before, "wrote outside"


# -- hard links to an outside file ---------------------------------------------------------


@pytest.fixture
def hard_link(workdir: Path) -> Path:
    secret = workdir.parent / "outside" / "secret.txt"
    os.link(secret, workdir / "linked.txt")  # same file system: tmp_path holds both
    return secret


@pytest.mark.parametrize(
    ("export", "extra"),
    [
        ("read", {}),
        ("write", {"content": "pwned\n", "append": True}),
        ("edit", {"old_text": "top", "new_text": "pwned"}),
    ],
)
async def test_a_hard_link_to_an_outside_file_is_not_read_or_changed(
    ctx: FakeContext, hard_link: Path, resolver: str, export: str, extra: dict[str, Any]
) -> None:
    error = await failure(ctx, export, {"path": "linked.txt", **extra})
    assert error.code == "E_TOOL_HARD_LINK"
    assert error.suggestion
    assert "top secret" not in error.message
    assert contents(hard_link) == ("top secret\n", 2)


async def test_replacing_a_hard_link_leaves_the_other_name_alone(
    ctx: FakeContext, workdir: Path, hard_link: Path, resolver: str
) -> None:
    out = await run(ctx, "write", {"path": "linked.txt", "content": "mine\n"})
    assert out["created"] is False
    assert contents(workdir / "linked.txt") == ("mine\n", 1)
    assert contents(hard_link) == ("top secret\n", 1)


@pytest.mark.parametrize("engine", ENGINES)
async def test_search_skips_a_hard_link_to_an_outside_file(
    ctx: FakeContext, workdir: Path, hard_link: Path, resolver: str, engine: str
) -> None:
    (workdir / "mine.txt").write_text("top of my list\n")
    ctx = replace(ctx, config={"searchEngine": engine})
    out = await run(ctx, "search", {"query": "top"})
    assert [m["path"] for m in out["matches"]] == ["mine.txt"]


# -- the existing hostile paths, through both resolvers ------------------------------------


@pytest.fixture
def hostile(workdir: Path) -> Path:
    (workdir / "sub").mkdir()
    (workdir / "link").symlink_to(workdir.parent / "outside")
    (workdir / "filelink").symlink_to(workdir.parent / "outside" / "secret.txt")
    return workdir


@pytest.mark.parametrize("escape", ESCAPES)
@pytest.mark.parametrize(("export", "extra"), CALLS)
async def test_hostile_paths_are_refused_by_both_resolvers(
    ctx: FakeContext, hostile: Path, resolver: str, export: str, extra: dict[str, Any], escape: str
) -> None:
    outside = hostile.parent / "outside"
    before = snapshot(outside)
    error = await failure(ctx, export, {"path": escape, **extra})
    assert error.code == "E_TOOL_PATH_ESCAPE"
    assert snapshot(outside) == before


async def test_symlinks_that_stay_inside_are_followed(
    ctx: FakeContext, workdir: Path, resolver: str
) -> None:
    (workdir / "real").mkdir()
    (workdir / "real" / "a.txt").write_text("a\n")
    (workdir / "rel").symlink_to("real")  # relative
    (workdir / "abs").symlink_to(workdir / "real")  # absolute, into the workspace
    (workdir / "real" / "up").symlink_to("../real/a.txt")  # relative, with ..
    for path in ("rel/a.txt", "abs/a.txt", "real/up", "abs/up"):
        out = await run(ctx, "read", {"path": path})
        assert out["content"] == "     1  a\n", path
    await run(ctx, "write", {"path": "abs/b.txt", "content": "b\n"})
    assert (workdir / "real" / "b.txt").read_text() == "b\n"
    await run(ctx, "write", {"path": "real/up", "content": "a2\n"})  # writes through the link
    assert (workdir / "real" / "up").is_symlink()
    assert (workdir / "real" / "a.txt").read_text() == "a2\n"
    listed = await run(ctx, "list", {"path": "abs"})
    assert [e["path"] for e in listed["entries"]] == ["abs/a.txt", "abs/b.txt", "abs/up"]


async def test_a_symlink_into_another_root_is_followed(
    ctx: FakeContext, workdir: Path, resolver: str
) -> None:
    other = workdir.parent / "outside"
    (workdir / "to-other").symlink_to(other)
    wide = replace(ctx, config={"roots": [".", str(other)]})
    out = await run(wide, "read", {"path": "to-other/secret.txt"})
    assert out["content"] == "     1  top secret\n"
    error = await failure(ctx, "read", {"path": "to-other/secret.txt"})  # one root only
    assert error.code == "E_TOOL_PATH_ESCAPE"


async def test_a_symlink_loop_is_a_coded_error(
    ctx: FakeContext, workdir: Path, resolver: str
) -> None:
    (workdir / "a").symlink_to("b")
    (workdir / "b").symlink_to("a")
    error = await failure(ctx, "read", {"path": "a/x"})
    assert error.code in {"E_TOOL_INVALID_ARGS", "E_TOOL_PATH_NOT_FOUND"}
    error = await failure(ctx, "write", {"path": "a", "content": "x"})
    assert error.code in {"E_TOOL_INVALID_ARGS", "E_TOOL_PATH_NOT_FOUND"}


async def test_a_fifo_is_refused_without_blocking(
    ctx: FakeContext, workdir: Path, resolver: str
) -> None:
    os.mkfifo(workdir / "pipe")
    error = await failure(ctx, "read", {"path": "pipe"})
    assert error.code == "E_TOOL_PATH_WRONG_TYPE"
