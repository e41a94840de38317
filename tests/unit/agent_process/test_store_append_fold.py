"""The append fold: a turn that only appended messages extends base.jsonl in place; anything
else, and every recovery, rewrites it; a torn append is repaired from the event log."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from agent_process.store import ConversationStore


def opened(path: Path) -> ConversationStore:
    store = ConversationStore(path)
    store.open()
    return store


def base_contents(path: Path) -> list[str]:
    lines = (path / "base.jsonl").read_bytes().splitlines()
    return [msgspec.json.decode(line)["content"] for line in lines]


def test_appends_extend_the_same_base_file_and_edits_rewrite_it(tmp_path: Path) -> None:
    store = opened(tmp_path)
    first = store.append("user", "one")
    store.fold()  # the first fold creates the base (rewrite)
    inode = os.stat(tmp_path / "base.jsonl").st_ino
    store.append("assistant", "two")
    store.append("user", "three")
    store.fold()
    assert os.stat(tmp_path / "base.jsonl").st_ino == inode  # appended, not replaced
    assert base_contents(tmp_path) == ["one", "two", "three"]
    assert (tmp_path / "events.jsonl").read_bytes() == b""
    store.replace(first.id, "uno")
    store.fold()
    assert os.stat(tmp_path / "base.jsonl").st_ino != inode  # an edit: rewritten
    assert base_contents(tmp_path) == ["uno", "two", "three"]
    store.append("assistant", "four")
    store.close()
    assert base_contents(tmp_path) == ["uno", "two", "three", "four"]
    assert [m.content for m in opened(tmp_path).messages] == ["uno", "two", "three", "four"]


def test_a_torn_append_to_the_base_is_repaired_from_the_events(tmp_path: Path) -> None:
    store = opened(tmp_path)
    store.append("user", "one")
    store.fold()
    store.append("assistant", "two")
    # the process dies in the middle of the append fold: half a line in the base, the
    # events not yet truncated
    with open(tmp_path / "base.jsonl", "ab") as fh:
        fh.write(b'{"id":"m_torn","ro')
    again = opened(tmp_path)
    assert [m.content for m in again.messages] == ["one", "two"]
    again.append("user", "three")
    again.fold()  # a recovery's first fold rewrites: the torn line is gone
    assert base_contents(tmp_path) == ["one", "two", "three"]
    assert [m.content for m in opened(tmp_path).messages] == ["one", "two", "three"]


def test_a_base_removed_under_the_store_is_written_whole(tmp_path: Path) -> None:
    store = opened(tmp_path)
    store.append("user", "one")
    store.fold()
    (tmp_path / "base.jsonl").unlink()
    store.append("assistant", "two")
    store.fold()
    assert base_contents(tmp_path) == ["one", "two"]


def test_edits_of_messages_not_yet_folded_still_append(tmp_path: Path) -> None:
    """A turn marks its own user message ended before the fold: that edit touches nothing the
    base holds, so the fold appends (the history is not rewritten every turn)."""
    store = opened(tmp_path)
    store.append("user", "one")
    store.fold()
    inode = os.stat(tmp_path / "base.jsonl").st_ino
    asked = store.append("user", "two")
    dropped = store.append("assistant", "draft")
    store.append("assistant", "three")
    store.replace(asked.id, "two", metadata={"turnOutcome": "completed"})
    store.remove(dropped.id)
    store.fold()
    assert os.stat(tmp_path / "base.jsonl").st_ino == inode  # appended, not replaced
    assert base_contents(tmp_path) == ["one", "two", "three"]
    again = opened(tmp_path)
    assert [m.content for m in again.messages] == ["one", "two", "three"]
    assert again.messages[1].metadata == {"turnOutcome": "completed"}


def test_an_edit_of_a_folded_message_after_an_append_still_rewrites(tmp_path: Path) -> None:
    store = opened(tmp_path)
    first = store.append("user", "one")
    store.fold()
    inode = os.stat(tmp_path / "base.jsonl").st_ino
    store.append("assistant", "two")
    store.remove(first.id)
    store.fold()
    assert os.stat(tmp_path / "base.jsonl").st_ino != inode
    assert base_contents(tmp_path) == ["two"]
