"""file-system read/write/list/mkdir/edit/create/delete/move, including hostile paths."""

from __future__ import annotations

import asyncio
import errno
import os
import stat
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bundles.sdk import ToolFailed

from .conftest import FakeContext, call, load_tool, names

fs = load_tool("tools/file_system.py")


async def run(ctx: FakeContext, export: str, args: dict[str, Any]) -> Any:
    async with asyncio.timeout(10):
        return await call(fs, export, ctx, args)


async def failure(ctx: FakeContext, export: str, args: dict[str, Any]) -> ToolFailed:
    with pytest.raises(ToolFailed) as info:
        await run(ctx, export, args)
    return info.value


# -- hostile paths, for every export that takes one ---------------------------------------

ESCAPES = ["../outside/secret.txt", "/etc/passwd", "link/secret.txt", "sub/../../outside/x"]
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("read", {}),
    ("write", {"content": "x"}),
    ("write", {"content": "x", "append": True}),
    ("list", {}),
    ("mkdir", {"recursive": True}),
    ("search", {"query": "secret"}),
    ("find", {"pattern": "*"}),
    ("edit", {"old_text": "top", "new_text": "pwned"}),
    ("create", {"edits": [{"type": "create", "content": "x"}]}),
    ("delete", {}),
]


@pytest.fixture
def hostile(workdir: Path) -> Path:
    (workdir / "sub").mkdir()
    (workdir / "link").symlink_to(workdir.parent / "outside")
    (workdir / "filelink").symlink_to(workdir.parent / "outside" / "secret.txt")
    return workdir


@pytest.mark.parametrize("escape", ESCAPES)
@pytest.mark.parametrize(("export", "extra"), CALLS)
async def test_paths_outside_the_workspace_are_refused(
    ctx: FakeContext, hostile: Path, export: str, extra: dict[str, Any], escape: str
) -> None:
    outside = hostile.parent / "outside"
    before = sorted(p.name for p in outside.iterdir())
    error = await failure(ctx, export, {"path": escape, **extra})
    assert error.code == "E_TOOL_PATH_ESCAPE"
    assert sorted(p.name for p in outside.iterdir()) == before
    assert (outside / "secret.txt").read_text() == "top secret\n"


async def test_a_symlink_to_an_outside_file_is_refused(ctx: FakeContext, hostile: Path) -> None:
    for export, extra in [
        ("read", {}),
        ("write", {"content": "x"}),
        ("edit", {"old_text": "top", "new_text": "x"}),
    ]:
        error = await failure(ctx, export, {"path": "filelink", **extra})
        assert error.code == "E_TOOL_PATH_ESCAPE"
    assert (hostile.parent / "outside" / "secret.txt").read_text() == "top secret\n"


async def test_a_dangling_symlink_pointing_outside_cannot_create_a_file(
    ctx: FakeContext, workdir: Path
) -> None:
    target = workdir.parent / "outside" / "planted.txt"
    (workdir / "dangling").symlink_to(target)
    error = await failure(ctx, "write", {"path": "dangling", "content": "x"})
    assert error.code == "E_TOOL_PATH_ESCAPE"
    assert not target.exists()


@pytest.mark.parametrize(
    ("source", "destination"),
    [("../outside/secret.txt", "stolen.txt"), ("a.txt", "../outside/a.txt"), ("a.txt", "/tmp/x")],
)
async def test_move_refuses_either_side_outside(
    ctx: FakeContext, workdir: Path, source: str, destination: str
) -> None:
    (workdir / "a.txt").write_text("a")
    error = await failure(ctx, "move", {"source": source, "destination": destination})
    assert error.code == "E_TOOL_PATH_ESCAPE"
    assert (workdir / "a.txt").exists()
    assert (workdir.parent / "outside" / "secret.txt").exists()


async def test_delete_and_move_act_on_a_symlink_not_its_target(
    ctx: FakeContext, hostile: Path
) -> None:
    secret = hostile.parent / "outside" / "secret.txt"
    moved = await run(ctx, "move", {"source": "filelink", "destination": "renamed"})
    assert moved == {"source": "filelink", "destination": "renamed"}
    assert (hostile / "renamed").is_symlink()
    out = await run(ctx, "delete", {"path": "renamed"})
    assert out["deleted"] == "symlink"
    out = await run(ctx, "delete", {"path": "link"})
    assert out["deleted"] == "symlink"
    assert secret.read_text() == "top secret\n"


async def test_the_workspace_root_cannot_be_deleted(ctx: FakeContext, workdir: Path) -> None:
    for raw in (".", "", "sub/..", str(workdir)):
        error = await failure(ctx, "delete", {"path": raw, "recursive": True})
        assert error.code in {"E_TOOL_INVALID_ARGS", "E_TOOL_PATH_ESCAPE"}
    assert names(workdir.parent) == ["outside", "work"]


async def test_configured_roots_widen_and_narrow_the_workspace(
    ctx: FakeContext, workdir: Path
) -> None:
    (workdir / "data").mkdir()
    (workdir / "data" / "x.txt").write_text("x\n")
    (workdir / "other.txt").write_text("o\n")
    narrow = replace(ctx, config={"roots": ["data"]})
    out = await run(narrow, "read", {"path": "x.txt"})
    assert out["content"] == "     1  x\n"
    error = await failure(narrow, "read", {"path": "../other.txt"})
    assert error.code == "E_TOOL_PATH_ESCAPE"
    wide = replace(ctx, config={"roots": [".", str(workdir.parent / "outside")]})
    out = await run(wide, "read", {"path": str(workdir.parent / "outside" / "secret.txt")})
    assert "top secret" in out["content"]


# -- read ----------------------------------------------------------------------------------


async def test_read_numbers_lines_and_honours_ranges(ctx: FakeContext, workdir: Path) -> None:
    (workdir / "f.txt").write_text("".join(f"line {i}\n" for i in range(1, 21)))
    whole = await run(ctx, "read", {"path": "f.txt"})
    assert whole["totalLines"] == 20
    assert whole["content"].splitlines()[0] == "     1  line 1"
    part = await run(ctx, "read", {"path": "f.txt", "start": 10, "end": 12})
    assert part["content"] == "    10  line 10\n    11  line 11\n    12  line 12\n"
    assert (part["startLine"], part["endLine"], part["truncated"]) == (10, 12, False)
    tail = await run(ctx, "read", {"path": "f.txt", "start": 19, "end": 500})
    assert tail["endLine"] == 20


async def test_read_caps_output_and_says_where_to_continue(ctx: FakeContext, workdir: Path) -> None:
    (workdir / "f.txt").write_text("x" * 50 + "\n" + "y" * 50 + "\n" + "z\n")
    out = await run(ctx, "read", {"path": "f.txt", "maxBytes": 70})
    assert out["truncated"] is True
    assert out["endLine"] == 1
    assert out["nextStart"] == 2


async def test_read_cuts_a_single_line_over_the_budget(ctx: FakeContext, workdir: Path) -> None:
    (workdir / "min.js").write_text("x" * 5000 + "\nsecond\n")
    out = await run(ctx, "read", {"path": "min.js", "maxBytes": 100})
    assert out["truncated"] is True
    assert len(out["content"].encode()) <= 101
    assert out["content"].startswith("     1  xxx")
    assert (out["endLine"], out["nextStart"]) == (1, 2)


async def test_read_refuses_bad_ranges_missing_binary_and_huge_files(
    ctx: FakeContext, workdir: Path
) -> None:
    (workdir / "f.txt").write_text("a\nb\n")
    (workdir / "bin").write_bytes(b"\x7fELF\x00\x01")
    (workdir / "big.txt").write_text("x" * 2000)
    (workdir / "d").mkdir()
    assert (await failure(ctx, "read", {"path": "f.txt", "start": 5})).code == "E_TOOL_INVALID_ARGS"
    bad = {"path": "f.txt", "start": 2, "end": 1}
    assert (await failure(ctx, "read", bad)).code == "E_TOOL_INVALID_ARGS"
    assert (await failure(ctx, "read", {"path": "nope"})).code == "E_TOOL_PATH_NOT_FOUND"
    assert (await failure(ctx, "read", {"path": "bin"})).code == "E_TOOL_BINARY_FILE"
    assert (await failure(ctx, "read", {"path": "d"})).code == "E_TOOL_PATH_WRONG_TYPE"
    small = replace(ctx, config={"maxFileBytes": 1000})
    assert (await failure(small, "read", {"path": "big.txt"})).code == "E_TOOL_FILE_TOO_LARGE"


# -- write, mkdir, list --------------------------------------------------------------------


async def test_write_creates_replaces_and_appends(ctx: FakeContext, workdir: Path) -> None:
    out = await run(ctx, "write", {"path": "new/dir/a.txt", "content": "one\n"})
    assert out == {"path": "new/dir/a.txt", "bytesWritten": 4, "created": True, "appended": False}
    out = await run(ctx, "write", {"path": "new/dir/a.txt", "content": "two\n"})
    assert out["created"] is False
    await run(ctx, "write", {"path": "new/dir/a.txt", "content": "three\n", "append": True})
    assert (workdir / "new" / "dir" / "a.txt").read_text() == "two\nthree\n"
    assert [p.name for p in (workdir / "new" / "dir").iterdir()] == ["a.txt"]  # no temp left


async def test_write_keeps_the_mode_and_refuses_too_much(ctx: FakeContext, workdir: Path) -> None:
    script = workdir / "run.sh"
    script.write_text("old")
    script.chmod(0o755)
    await run(ctx, "write", {"path": "run.sh", "content": "new"})
    assert script.stat().st_mode & 0o777 == 0o755
    small = replace(ctx, config={"maxFileBytes": 10})
    error = await failure(small, "write", {"path": "big", "content": "x" * 11})
    assert error.code == "E_TOOL_FILE_TOO_LARGE"
    (workdir / "d").mkdir()
    assert (await failure(ctx, "write", {"path": "d", "content": "x"})).code == (
        "E_TOOL_PATH_WRONG_TYPE"
    )


async def test_mkdir(ctx: FakeContext, workdir: Path) -> None:
    assert await run(ctx, "mkdir", {"path": "a"}) == {"path": "a", "created": True}
    assert (await failure(ctx, "mkdir", {"path": "a"})).code == "E_TOOL_PATH_EXISTS"
    assert (await failure(ctx, "mkdir", {"path": "x/y"})).code == "E_TOOL_PATH_NOT_FOUND"
    out = await run(ctx, "mkdir", {"path": "x/y", "recursive": True})
    assert out == {"path": "x/y", "created": True}
    assert (await run(ctx, "mkdir", {"path": "x/y", "recursive": True}))["created"] is False


async def test_list_flat_recursive_and_filtered(ctx: FakeContext, workdir: Path) -> None:
    (workdir / "b.txt").write_text("bb")
    (workdir / "a").mkdir()
    (workdir / "a" / "c.txt").write_text("c")
    (workdir / "ln").symlink_to(workdir.parent / "outside")
    flat = await run(ctx, "list", {})
    assert flat["entries"] == [
        {"path": "a", "type": "dir"},
        {"path": "b.txt", "type": "file", "size": 2},
        {"path": "ln", "type": "symlink"},
    ]
    deep = await run(ctx, "list", {"recursive": True, "includeDirs": False})
    assert [e["path"] for e in deep["entries"]] == ["a/c.txt", "b.txt", "ln"]
    dirs = await run(ctx, "list", {"path": "a", "includeFiles": False})
    assert dirs["entries"] == []
    capped = await run(replace(ctx, config={"maxListEntries": 2}), "list", {})
    assert capped["truncated"] is True
    assert len(capped["entries"]) == 2


# -- edit and create -----------------------------------------------------------------------


async def test_edit_replaces_exactly_one_match(ctx: FakeContext, workdir: Path) -> None:
    (workdir / "m.py").write_text("def f():\n    return 1\n")
    out = await run(ctx, "edit", {"path": "m.py", "old_text": "return 1", "new_text": "return 2"})
    assert out == {"path": "m.py", "replacements": 1, "line": 2}
    assert (workdir / "m.py").read_text() == "def f():\n    return 2\n"


async def test_edit_with_no_match_says_zero(ctx: FakeContext, workdir: Path) -> None:
    (workdir / "m.py").write_text("def f():\n    return 1\n")
    error = await failure(ctx, "edit", {"path": "m.py", "old_text": "return  1", "new_text": "x"})
    assert error.code == "E_TOOL_EDIT_NO_MATCH"
    assert "0 matches" in error.message
    assert error.suggestion is not None
    assert "whitespace" in error.suggestion
    assert (workdir / "m.py").read_text() == "def f():\n    return 1\n"


async def test_edit_with_two_matches_says_how_many_and_where(
    ctx: FakeContext, workdir: Path
) -> None:
    (workdir / "m.py").write_text("x = 1\ny = 2\nx = 1\n")
    error = await failure(ctx, "edit", {"path": "m.py", "old_text": "x = 1", "new_text": "x = 3"})
    assert error.code == "E_TOOL_EDIT_MULTIPLE_MATCHES"
    assert "2 places" in error.message
    assert "lines 1, 3" in error.message
    assert (workdir / "m.py").read_text() == "x = 1\ny = 2\nx = 1\n"


async def test_create_builds_a_file_from_edits(ctx: FakeContext, workdir: Path) -> None:
    edits = [
        {"type": "create", "content": "// header\nfn main() {}\n"},
        {"type": "insert_after", "marker": "// header", "content": "use std::fs;"},
        {"type": "insert_before", "marker": "fn main", "content": "// entry\n"},
        {"type": "replace", "marker": "{}", "content": "{ run() }"},
        {"type": "append", "content": "// end\n"},
        {"type": "prepend", "content": "#![allow(unused)]\n"},
    ]
    out = await run(ctx, "create", {"path": "src/main.rs", "edits": edits})
    assert out["created"] is True
    assert (workdir / "src" / "main.rs").read_text() == (
        "#![allow(unused)]\n// header\nuse std::fs;\n// entry\nfn main() { run() }\n// end\n"
    )


async def test_create_is_all_or_nothing(ctx: FakeContext, workdir: Path) -> None:
    edits = [
        {"type": "create", "content": "a\na\n"},
        {"type": "insert_after", "marker": "a", "content": "b"},
    ]
    error = await failure(ctx, "create", {"path": "f.txt", "edits": edits})
    assert error.code == "E_TOOL_EDIT_MULTIPLE_MATCHES"
    assert "edit #2" in error.message
    assert names(workdir) == []
    missing = [{"type": "insert_after", "marker": "zzz", "content": "b"}]
    assert (await failure(ctx, "create", {"path": "f.txt", "edits": missing})).code == (
        "E_TOOL_EDIT_NO_MATCH"
    )


async def test_create_refuses_an_existing_file_unless_overwrite(
    ctx: FakeContext, workdir: Path
) -> None:
    (workdir / "f.txt").write_text("keep")
    edits = [{"type": "create", "content": "new"}]
    error = await failure(ctx, "create", {"path": "f.txt", "edits": edits})
    assert error.code == "E_TOOL_PATH_EXISTS"
    assert (workdir / "f.txt").read_text() == "keep"
    await run(ctx, "create", {"path": "f.txt", "edits": edits, "overwrite": True})
    assert (workdir / "f.txt").read_text() == "new"


# -- delete and move -----------------------------------------------------------------------


async def test_delete_files_and_directories(ctx: FakeContext, workdir: Path) -> None:
    (workdir / "f").write_text("x")
    (workdir / "empty").mkdir()
    (workdir / "full").mkdir()
    (workdir / "full" / "x").write_text("x")
    assert (await run(ctx, "delete", {"path": "f"}))["deleted"] == "file"
    assert (await run(ctx, "delete", {"path": "empty"}))["deleted"] == "directory"
    assert (await failure(ctx, "delete", {"path": "full"})).code == "E_TOOL_INVALID_ARGS"
    assert (await run(ctx, "delete", {"path": "full", "recursive": True}))["deleted"] == "directory"
    assert (await failure(ctx, "delete", {"path": "f"})).code == "E_TOOL_PATH_NOT_FOUND"
    assert names(workdir) == []


async def test_move_renames_and_refuses_to_clobber(ctx: FakeContext, workdir: Path) -> None:
    (workdir / "a.txt").write_text("a")
    (workdir / "b.txt").write_text("b")
    error = await failure(ctx, "move", {"source": "a.txt", "destination": "b.txt"})
    assert error.code == "E_TOOL_PATH_EXISTS"
    out = await run(ctx, "move", {"source": "a.txt", "destination": "d/c.txt"})
    assert out == {"source": "a.txt", "destination": "d/c.txt"}
    assert (workdir / "d" / "c.txt").read_text() == "a"
    await run(ctx, "move", {"source": "d/c.txt", "destination": "b.txt", "overwrite": True})
    assert (workdir / "b.txt").read_text() == "a"
    missing = await failure(ctx, "move", {"source": "nope", "destination": "x"})
    assert missing.code == "E_TOOL_PATH_NOT_FOUND"


async def test_moving_a_directory_into_itself_is_refused(ctx: FakeContext, workdir: Path) -> None:
    (workdir / "d").mkdir()
    error = await failure(ctx, "move", {"source": "d", "destination": "d/inside"})
    assert error.code == "E_TOOL"
    assert error.suggestion == "Pick a destination outside the directory being moved."
    assert str(workdir) not in error.message
    assert sorted(names(workdir)) == ["d"]


async def test_os_errors_become_coded_failures_without_host_paths(
    ctx: FakeContext, workdir: Path
) -> None:
    (workdir / "f").write_text("a file, not a directory")
    error = await failure(ctx, "write", {"path": "f/x.txt", "content": "x"})
    assert error.code == "E_TOOL_PATH_NOT_FOUND"  # a file where a directory should be
    assert str(workdir) not in error.message
    assert (workdir / "f").read_text() == "a file, not a directory"
    long = await failure(ctx, "write", {"path": "n" * 300, "content": "x"})
    assert long.code == "E_TOOL"
    assert long.message.startswith(f"file operation failed ({errno.errorcode[errno.ENAMETOOLONG]})")
    assert str(workdir) not in long.message


async def test_a_new_file_gets_the_umask_mode_without_the_umask_being_set(
    ctx: FakeContext, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading the umask by setting it (even back at once) made it 0 process-wide for an
    instant: another thread creating a file then made it world-writable."""
    current = os.umask(0o022)
    os.umask(current)

    def refuse(_mask: int) -> int:
        raise AssertionError("the process umask was touched")

    monkeypatch.setattr(os, "umask", refuse)
    await run(ctx, "write", {"path": "new.txt", "content": "x"})
    assert stat.S_IMODE((workdir / "new.txt").stat().st_mode) == 0o666 & ~current
