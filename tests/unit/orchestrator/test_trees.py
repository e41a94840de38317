"""remove_tree: the path is gone at once (renamed aside), the tree is deleted off the loop."""

from __future__ import annotations

import asyncio
from pathlib import Path

from orchestrator.supervision.trees import is_aside, remove_tree
from protocol.endpoints import path_segment


def names(directory: Path) -> list[str]:
    """Sorted entry names (a sync helper: async tests must not block on pathlib)."""
    return sorted(p.name for p in directory.iterdir())


async def test_a_tree_is_removed_and_nothing_is_left_beside_it(tmp_path: Path) -> None:
    tree = tmp_path / "k" / "agent"
    (tree / "messages").mkdir(parents=True)
    (tree / "messages" / "base.jsonl").write_text("{}\n")
    (tmp_path / "k" / "other").mkdir()
    async with asyncio.timeout(10):
        await remove_tree(tree)
    assert names(tmp_path / "k") == ["other"]


async def test_a_missing_tree_is_fine(tmp_path: Path) -> None:
    async with asyncio.timeout(10):
        await remove_tree(tmp_path / "absent")
    assert names(tmp_path) == []


async def test_a_name_at_the_length_limit_is_deleted_in_place(tmp_path: Path) -> None:
    tree = tmp_path / ("x" * 255)
    tree.mkdir()
    (tree / "f").write_text("x")
    async with asyncio.timeout(10):
        await remove_tree(tree)
    assert names(tmp_path) == []


def test_an_aside_name_is_never_an_instance_or_agent_directory() -> None:
    for text in ("#deleting-1", "a#deleting-b", "~#", "%23deleting-"):
        assert not is_aside(path_segment(text))
    assert is_aside("agent#deleting-0a1b2c3d")
