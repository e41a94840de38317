"""The event-sourced conversation store: events as they happen, atomic fold, replay."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
import pytest

from agent_process.store import ConversationStore
from protocol.conversation import Role


def opened(path: Path) -> ConversationStore:
    store = ConversationStore(path)
    store.open()
    return store


def event_types(path: Path) -> list[str]:
    lines = (path / "events.jsonl").read_bytes().splitlines()
    return [msgspec.json.decode(line)["type"] for line in lines]


def test_each_edit_is_written_when_it_happens_and_fold_moves_them_to_base(tmp_path: Path) -> None:
    store = opened(tmp_path)
    first = store.append("user", "hi")
    store.append("assistant", "hello")
    assert event_types(tmp_path) == ["append", "append"]
    store.replace(first.id, "hi there")
    system = store.append("system", "note")
    store.remove(system.id)
    assert event_types(tmp_path) == ["append", "append", "replace", "append", "remove"]
    store.fold()
    assert (tmp_path / "events.jsonl").read_bytes() == b""
    base = [msgspec.json.decode(x) for x in (tmp_path / "base.jsonl").read_bytes().splitlines()]
    assert [(m["role"], m["content"]) for m in base] == [
        ("user", "hi there"),
        ("assistant", "hello"),
    ]
    assert base[0]["id"] == first.id  # ids are stable through replace and fold
    store.close()


def test_unfolded_events_are_replayed_by_the_next_process(tmp_path: Path) -> None:
    store = opened(tmp_path)
    store.append("user", "one")
    store.fold()
    store.append("assistant", "two")
    tool = store.append("tool", "{}", tool_call_id="c1", tool_name="t__x")
    # no fold, no close: the process dies here
    again = opened(tmp_path)
    assert again.recovered_events == 2
    assert [m.content for m in again.messages] == ["one", "two", "{}"]
    assert again.messages[2].role is Role.TOOL and again.messages[2].id == tool.id


def test_truncate_clears_and_later_appends_survive_replay(tmp_path: Path) -> None:
    store = opened(tmp_path)
    store.append("user", "old")
    store.fold()
    store.truncate()
    store.append("user", "new")
    again = opened(tmp_path)
    assert [m.content for m in again.messages] == ["new"]


def test_torn_last_line_is_skipped_and_earlier_lines_kept(tmp_path: Path) -> None:
    store = opened(tmp_path)
    store.append("user", "kept")
    with open(tmp_path / "events.jsonl", "ab") as fh:
        fh.write(b'{"type":"append","message":{"id":"m_x","ro')  # cut by a crash mid-write
    again = opened(tmp_path)
    assert [m.content for m in again.messages] == ["kept"]


def test_replaying_events_already_folded_changes_nothing(tmp_path: Path) -> None:
    store = opened(tmp_path)
    a = store.append("user", "a")
    store.append("assistant", "b")
    store.replace(a.id, "a2")
    leftover = (tmp_path / "events.jsonl").read_bytes()
    store.fold()
    expected = store.messages
    # a crash after the base rename but before the events truncation
    (tmp_path / "events.jsonl").write_bytes(leftover)
    again = opened(tmp_path)
    assert again.messages == expected


def test_replace_of_an_unknown_id_is_an_error_and_writes_nothing(tmp_path: Path) -> None:
    store = opened(tmp_path)
    with pytest.raises(KeyError, match="no message with id"):
        store.replace("m_missing", "x")
    assert (tmp_path / "events.jsonl").read_bytes() == b""


def test_a_closed_store_refuses_edits(tmp_path: Path) -> None:
    store = opened(tmp_path)
    store.close()
    with pytest.raises(RuntimeError, match="not open"):
        store.append("user", "late")


def test_a_store_on_a_sink_writes_every_event_there_and_nothing_to_its_directory(
    tmp_path: Path,
) -> None:
    """The fork server's rehearsal: the conversation in memory, the records to a sink."""
    directory, sink_path = tmp_path / "messages", tmp_path / "sink"
    sink = os.open(sink_path, os.O_WRONLY | os.O_CREAT)
    try:
        store = ConversationStore(directory, sink=sink)
        store.open()
        first = store.append("user", "hi")
        store.replace(first.id, "hi there")
        store.fold()
        assert [m.content for m in store.messages] == ["hi there"]
        store.close()
        os.fstat(sink)  # still open: the caller's to close
    finally:
        os.close(sink)
    assert not directory.exists()
    lines = sink_path.read_bytes().splitlines()
    assert [msgspec.json.decode(line)["type"] for line in lines] == ["append", "replace"]


def test_a_closed_store_leaves_only_its_base_and_the_next_open_goes_on(tmp_path: Path) -> None:
    store = opened(tmp_path)
    store.append("user", "kept")
    store.close()  # folds: the events file is empty, so it is removed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base.jsonl"]
    again = opened(tmp_path)
    again.append("assistant", "next")
    again.fold()
    assert [m.content for m in again.messages] == ["kept", "next"]
    assert (tmp_path / "events.jsonl").read_bytes() == b""  # open made it again
