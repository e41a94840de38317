"""file-system search (ripgrep and the Python fallback agree) and find."""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bundles.sdk import ToolFailed

from .conftest import FakeContext, call, load_tool

fs = load_tool("tools/file_system.py")
ignore = fs._search._ignore  # the helper exactly as file_system loaded it

ENGINES = [
    pytest.param(
        "ripgrep",
        marks=pytest.mark.skipif(shutil.which("rg") is None, reason="ripgrep is not on PATH"),
    ),
    "python",
]


@pytest.fixture
def tree(workdir: Path) -> Path:
    files = {
        "src/app.py": "import os\n\ndef main():\n    return os.getcwd()  # TODO tidy\n",
        "src/util.py": "def helper():\n    pass  # TODO later\n",
        "src/notes.md": "TODO: docs\n",
        "build/out.py": "# TODO generated\n",
        "logs/run.log": "TODO in a log\n",
        "logs/keep.log": "TODO kept by negation\n",
        ".hidden/h.py": "# TODO hidden\n",
        "pkg/Cargo.toml": "[package]\n",
        "Cargo.toml": "[workspace]\n",
        "pkg/sub/.gitignore": "local.txt\n",
        "pkg/sub/local.txt": "TODO local ignore\n",
        "pkg/sub/other.txt": "TODO not ignored\n",
    }
    for rel, text in files.items():
        (workdir / rel).parent.mkdir(parents=True, exist_ok=True)
        (workdir / rel).write_text(text)
    (workdir / ".gitignore").write_text("build/\n*.log\n!keep.log\n")
    (workdir / "blob.bin").write_bytes(b"TODO\x00binary")
    (workdir / "outlink").symlink_to(workdir.parent / "outside")
    (workdir.parent / "outside" / "todo.txt").write_text("TODO outside\n")
    return workdir


def engine_ctx(ctx: FakeContext, engine: str, **config: Any) -> FakeContext:
    return replace(ctx, config={"searchEngine": engine, **config})


async def run(ctx: FakeContext, export: str, args: dict[str, Any]) -> Any:
    async with asyncio.timeout(20):
        return await call(fs, export, ctx, args)


@pytest.mark.parametrize("engine", ENGINES)
async def test_search_honours_gitignore_hidden_binary_and_symlinks(
    ctx: FakeContext, tree: Path, engine: str
) -> None:
    out = await run(engine_ctx(ctx, engine), "search", {"query": "TODO"})
    assert out["engine"] == engine
    assert [(m["path"], m["line"]) for m in out["matches"]] == [
        ("logs/keep.log", 1),
        ("pkg/sub/other.txt", 1),
        ("src/app.py", 4),
        ("src/notes.md", 1),
        ("src/util.py", 2),
    ]
    assert out["matches"][2]["text"] == "    return os.getcwd()  # TODO tidy"
    assert out["count"] == 5
    assert out["truncated"] is False


@pytest.mark.parametrize("engine", ENGINES)
async def test_search_with_glob_path_and_regex(ctx: FakeContext, tree: Path, engine: str) -> None:
    c = engine_ctx(ctx, engine)
    py = await run(c, "search", {"query": r"TODO \w+", "glob": "*.py"})
    assert [m["path"] for m in py["matches"]] == ["src/app.py", "src/util.py"]
    not_md = await run(c, "search", {"query": "TODO", "glob": "!*.md", "path": "src"})
    assert [m["path"] for m in not_md["matches"]] == ["src/app.py", "src/util.py"]
    sub = await run(c, "search", {"query": "TODO", "path": "logs"})
    assert [m["path"] for m in sub["matches"]] == ["logs/keep.log"]  # root .gitignore applies
    anchored = await run(c, "search", {"query": "^def", "glob": "src/*.py"})
    assert [(m["path"], m["line"]) for m in anchored["matches"]] == [
        ("src/app.py", 3),
        ("src/util.py", 1),
    ]


@pytest.mark.parametrize("engine", ENGINES)
async def test_search_stops_at_max_results(ctx: FakeContext, workdir: Path, engine: str) -> None:
    (workdir / "many.txt").write_text("hit\n" * 50)
    out = await run(engine_ctx(ctx, engine), "search", {"query": "hit", "maxResults": 7})
    assert out["count"] == 7
    assert out["truncated"] is True
    assert [m["line"] for m in out["matches"]] == list(range(1, 8))


@pytest.mark.parametrize("engine", ENGINES)
async def test_search_reports_an_invalid_regex(ctx: FakeContext, tree: Path, engine: str) -> None:
    with pytest.raises(ToolFailed) as info:
        await run(engine_ctx(ctx, engine), "search", {"query": "(unclosed"})
    assert info.value.code == "E_TOOL_QUERY_INVALID"


@pytest.mark.parametrize("engine", ENGINES)
async def test_search_refuses_a_path_outside(ctx: FakeContext, tree: Path, engine: str) -> None:
    for path in ("..", "outlink", "/"):
        with pytest.raises(ToolFailed) as info:
            await run(engine_ctx(ctx, engine), "search", {"query": "TODO", "path": path})
        assert info.value.code == "E_TOOL_PATH_ESCAPE"


async def test_search_engine_ripgrep_missing_is_a_clear_error(
    ctx: FakeContext, tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ToolFailed) as info:
        await run(engine_ctx(ctx, "ripgrep"), "search", {"query": "TODO"})
    assert "rg is not on PATH" in info.value.message
    out = await run(engine_ctx(ctx, "auto"), "search", {"query": "TODO"})
    assert out["engine"] == "python"


async def test_find_matches_names_at_any_depth_and_paths(ctx: FakeContext, tree: Path) -> None:
    out = await run(ctx, "find", {"pattern": "*.toml"})
    assert out["files"] == ["Cargo.toml", "pkg/Cargo.toml"]
    out = await run(ctx, "find", {"pattern": "src/*.py"})
    assert out["files"] == ["src/app.py", "src/util.py"]
    out = await run(ctx, "find", {"pattern": "**/*.{log,txt}"})
    assert out["files"] == ["logs/keep.log", "pkg/sub/other.txt"]
    out = await run(ctx, "find", {"pattern": "*", "path": "pkg", "maxResults": 1})
    assert (out["files"], out["truncated"]) == (["pkg/Cargo.toml"], True)


@pytest.mark.parametrize(
    ("pattern", "path", "is_dir", "expected"),
    [
        ("*.log", "a/b/c.log", False, True),
        ("/root.txt", "root.txt", False, True),
        ("/root.txt", "a/root.txt", False, False),
        ("build/", "build", True, True),
        ("build/", "build", False, False),
        ("a/**/z", "a/z", False, True),
        ("a/**/z", "a/b/c/z", False, True),
        ("**/cache", "x/y/cache", True, True),
        ("doc/*.md", "doc/a.md", False, True),
        ("doc/*.md", "doc/sub/a.md", False, False),
        ("file[0-9].txt", "file7.txt", False, True),
        ("file[!0-9].txt", "file7.txt", False, False),
        ("\\#hash", "#hash", False, True),
        ("?.c", "ab.c", False, False),
    ],
)
def test_gitignore_patterns(pattern: str, path: str, is_dir: bool, expected: bool) -> None:
    compiled = ignore.compile_pattern(pattern)
    assert compiled is not None
    assert compiled.matches(path, is_dir) is expected


def test_gitignore_comments_and_blanks_are_not_patterns() -> None:
    assert ignore.compile_pattern("# comment") is None
    assert ignore.compile_pattern("   ") is None
    assert ignore.compile_pattern("!keep").negate is True


def test_an_invalid_line_in_an_ignore_file_is_skipped_and_the_rest_applies(workdir: Path) -> None:
    (workdir / ".gitignore").write_text("!\n*.log\nbroken\\\n")
    for name in ("a.log", "b.txt", "broken\\"):
        (workdir / name).write_text("x")
    assert [rel for _path, rel in ignore.walk_files(workdir, workdir)] == ["b.txt", "broken\\"]


@pytest.mark.parametrize(
    "glob",
    ["*.py\\", "!", "{a,b}{c,d}{e,f}{g,h}{i,j}{k,l}{m,n}"],
    ids=["trailing-backslash", "lone-bang", "brace-bomb"],
)
async def test_a_glob_that_is_no_pattern_is_invalid_args(
    ctx: FakeContext, tree: Path, glob: str
) -> None:
    for export, args in (("find", {"pattern": glob}), ("search", {"query": "x", "glob": glob})):
        with pytest.raises(ToolFailed) as info:
            await run(engine_ctx(ctx, "python"), export, args)
        assert info.value.code == "E_TOOL_INVALID_ARGS"
        assert info.value.suggestion is not None and "{a,b}" in info.value.suggestion


def test_brace_alternatives_expand_and_an_escaped_brace_is_literal() -> None:
    assert ignore.expand_braces("src/*.{py,pyi}") == ["src/*.py", "src/*.pyi"]
    assert ignore.expand_braces("{a,b}/{c,d}") == ["a/c", "a/d", "b/c", "b/d"]
    assert ignore.expand_braces("\\{a,b}") == ["\\{a,b}"]
    assert ignore.expand_braces("{open") == ["{open"]


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_nul_byte_in_the_query_is_searched_for(
    ctx: FakeContext, tree: Path, engine: str
) -> None:
    """Found by `make fuzz`: ripgrep's argv cannot hold it (an uncoded ValueError before);
    both engines now search for it like any other character."""
    out = await run(engine_ctx(ctx, engine), "search", {"query": "TO\x00DO"})
    assert out["matches"] == []
