"""The read-only conversation reader against the real store's writes: after every kind of change
the reader sees what the store holds, and following reports each message once."""

from __future__ import annotations

import shutil
from pathlib import Path

from agent_process.store import ConversationStore
from protocol.conversation import Role
from protocol.transcript import ConversationReader, decode_base, decode_events


def opened(path: Path) -> ConversationStore:
    store = ConversationStore(path)
    store.open()
    return store


def same(reader: ConversationReader, store: ConversationStore) -> bool:
    return reader.messages == store.messages


def test_reader_folds_base_and_events_like_the_store(tmp_path: Path) -> None:
    store = opened(tmp_path)
    first = store.append("user", "hi")
    store.fold()
    store.append("assistant", "hello")
    store.replace(first.id, "hi there")
    reader = ConversationReader(tmp_path)
    change = reader.poll()
    assert change is not None and [m.content for m in change.added] == ["hi there", "hello"]
    assert same(reader, store)
    assert reader.poll() is None  # nothing written since


def test_following_reports_each_new_message_once_across_folds(tmp_path: Path) -> None:
    store = opened(tmp_path)
    reader = ConversationReader(tmp_path)
    assert reader.poll() is None
    seen: list[str] = []
    for turn in range(3):
        store.append("user", f"q{turn}")
        change = reader.poll()
        assert change is not None
        seen += [m.content for m in change.added]
        store.append("assistant", f"a{turn}")
        store.fold()  # appends to the base, truncates the events
        change = reader.poll()
        if change is not None:
            seen += [m.content for m in change.added]
        assert same(reader, store)
    assert seen == ["q0", "a0", "q1", "a1", "q2", "a2"]


def test_truncated_and_written_again_between_two_looks_is_read_from_the_start(
    tmp_path: Path,
) -> None:
    store = opened(tmp_path)
    store.append("user", "a long first message " * 20)
    reader = ConversationReader(tmp_path)
    reader.poll()
    store.fold()  # events truncated ...
    store.append("user", "x")  # ... and written again, longer than before
    store.append("assistant", "y" * 1000)
    change = reader.poll()
    assert change is not None and [m.content for m in change.added] == ["x", "y" * 1000]
    assert same(reader, store) and reader.bad_lines == 0


def test_a_rewrite_a_truncate_and_a_deleted_instance(tmp_path: Path) -> None:
    store = opened(tmp_path)
    kept = store.append("user", "keep")
    gone = store.append("user", "gone")
    store.fold()
    reader = ConversationReader(tmp_path)
    reader.poll()
    store.remove(gone.id)
    store.fold()  # a remove folds by rewriting base.jsonl (a new inode)
    change = reader.poll()
    assert change is not None and change.removed == [gone.id] and same(reader, store)
    store.truncate()
    change = reader.poll()
    assert change is not None and change.removed == [kept.id] and reader.messages == []
    store.close()
    shutil.rmtree(tmp_path)  # `instance delete`
    assert reader.poll() is None or reader.messages == []


def test_a_torn_last_line_waits_until_it_is_whole(tmp_path: Path) -> None:
    store = opened(tmp_path)
    store.append("user", "whole")
    events = tmp_path / "events.jsonl"
    line = events.read_bytes()
    with events.open("ab") as fh:
        fh.write(line[:20])  # a write cut in the middle (the store writes each event at once)
    reader = ConversationReader(tmp_path)
    change = reader.poll()
    assert change is not None and len(change.added) == 1 and reader.bad_lines == 0


def test_trace_ids_come_from_the_user_message_or_the_runtime_events(tmp_path: Path) -> None:
    store = opened(tmp_path)
    store.append("user", "new", turn_id="t1", metadata={"traceId": "a" * 32})
    store.append("user", "old", turn_id="t2")
    store.append(Role.ASSISTANT.value, "answer", turn_id="t2")
    (tmp_path / "runtime-events.jsonl").write_text(
        '{"type":"turn.started","at":1,"agent":"a","instanceKey":"k","turnId":"t2",'
        '"traceId":"' + "b" * 32 + '"}\n{"type":"step.started"}\n'
    )
    reader = ConversationReader(tmp_path)
    reader.poll()
    assert [reader.trace_of(m) for m in reader.messages] == ["a" * 32, "b" * 32, "b" * 32]


def test_garbage_lines_are_counted_not_fatal(tmp_path: Path) -> None:
    (tmp_path / "base.jsonl").write_bytes(b'{"id":"m1","role":"user","content":"ok"}\nnot json\n')
    (tmp_path / "events.jsonl").write_bytes(b'{"type":"nope"}\n' + b"\xff\xfe garbage\n")
    reader = ConversationReader(tmp_path)
    reader.poll()
    assert [m.content for m in reader.messages] == ["ok"] and reader.bad_lines == 3
    assert decode_base(b"")[1] and decode_events(b"\n\n") == ([], [])
