"""Log files rotate by size (`orchestrator.supervision.logfiles`) and readers follow them
(`logview.Reader`):
no line split, lost or read twice, however reads and rotations interleave."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.observe import logview
from orchestrator.supervision.logfiles import LogFile, Rotation, rotate, rotated, rotated_files
from protocol.endpoints import StateLayout


def _line(n: int, pad: int = 0) -> bytes:
    return json.dumps({"timestamp": "2026-01-31T12:00:00Z", "event": f"e{n}", "pad": "x" * pad})\
        .encode() + b"\n"  # fmt: skip


def _chain_bytes(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in [*rotated_files(path), path] if p.exists())


def test_a_file_rotates_before_the_line_that_would_pass_its_size(tmp_path: Path) -> None:
    path = tmp_path / "orchestrator.log"
    log = LogFile(path, Rotation(max_bytes=1000, keep=50))
    lines = [_line(i, pad=i % 200) for i in range(100)]
    for line in lines:
        log.write(line)
    log.close()
    files = [*rotated_files(path), path]
    assert len(files) > 5
    assert all(0 < p.stat().st_size <= 1000 for p in files)
    assert _chain_bytes(path) == b"".join(lines)  # every line once, in order, none split
    assert all(p.read_bytes().endswith(b"\n") for p in files)
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in files)


def test_only_keep_rotated_files_stay(tmp_path: Path) -> None:
    path = tmp_path / "a.k.log"
    log = LogFile(path, Rotation(max_bytes=200, keep=2))
    lines = [_line(i, pad=100) for i in range(20)]  # one line per file
    for line in lines:
        log.write(line)
    log.close()
    assert rotated_files(path) == [rotated(path, 2), rotated(path, 1)]
    assert _chain_bytes(path) == b"".join(lines[-3:])


def test_keep_zero_starts_the_file_over(tmp_path: Path) -> None:
    path = tmp_path / "a.k.log"
    log = LogFile(path, Rotation(max_bytes=200, keep=0))
    for i in range(5):
        log.write(_line(i, pad=100))
    log.close()
    assert rotated_files(path) == []
    assert path.read_bytes() == _line(4, pad=100)


def test_a_line_larger_than_the_size_is_written_whole(tmp_path: Path) -> None:
    path = tmp_path / "a.k.log"
    log = LogFile(path, Rotation(max_bytes=100, keep=3))
    big = _line(1, pad=500)
    log.write(_line(0))
    log.write(big)
    log.write(_line(2))
    log.close()
    assert rotated(path, 1).read_bytes() == big
    assert _chain_bytes(path) == _line(0) + big + _line(2)


def test_rotated_files_of_a_larger_keep_go_at_the_next_rotation(tmp_path: Path) -> None:
    path = tmp_path / "orchestrator.log"
    for n in range(1, 8):
        rotated(path, n).write_bytes(b"old\n")
    path.write_bytes(b"current\n")
    rotate(path, 2)
    assert rotated_files(path) == [rotated(path, 2), rotated(path, 1)]
    assert rotated(path, 1).read_bytes() == b"current\n"
    assert not path.exists()


def test_two_writers_of_one_file_rotate_it_once(tmp_path: Path) -> None:
    """A restarted child's output and its old pipe still draining: one file, both writers."""
    path = tmp_path / "a.k.log"
    rotation = Rotation(max_bytes=600, keep=100)
    first, second = LogFile(path, rotation), LogFile(path, rotation)
    written = []
    for i in range(60):
        line = _line(i, pad=50)
        (first if i % 3 else second).write(line)
        written.append(line)
    first.close()
    second.close()
    got = _chain_bytes(path).splitlines(keepends=True)
    assert sorted(got) == sorted(written)  # none lost, none twice (order may differ by writer)


def test_a_closed_file_refuses_writes(tmp_path: Path) -> None:
    log = LogFile(tmp_path / "x.log", Rotation(max_bytes=0, keep=0))
    log.close()
    with pytest.raises(ValueError):
        log.write(b"late\n")


def test_discovery_names_a_log_once_with_its_rotated_files(tmp_path: Path) -> None:
    layout = StateLayout(tmp_path)
    logs = layout.logs_dir("s")
    logs.mkdir(parents=True)
    live = layout.process_log("s", "coder", "k.log")  # a key that looks like a file name
    for path in (layout.orchestrator_log("s"), live, rotated(live, 1), rotated(live, 12)):
        path.write_bytes(_line(0))
    gone = layout.process_log("s", "coder", "quiet")  # its current file was dropped empty
    rotated(gone, 1).write_bytes(_line(0))
    (logs / "coder.k.log.01").write_bytes(b"")  # not a rotated file's name
    (logs / "notes.txt").write_bytes(b"")
    found = {(s.path.name, s.agent, s.instance) for s in logview.discover(layout, "s")}
    assert found == {
        ("orchestrator.log", None, None),
        (live.name, "coder", "k.log"),
        (gone.name, "coder", "quiet"),
    }


def _reader(path: Path) -> logview.Reader:
    return logview.Reader(logview.LogSource(path, "orchestrator", "s"))


def _events(records: list[logview.Record]) -> list[str]:
    return [str(r.data["event"]) for r in records]


def test_the_first_read_takes_the_rotated_files_oldest_first(tmp_path: Path) -> None:
    path = tmp_path / "orchestrator.log"
    log = LogFile(path, Rotation(max_bytes=300, keep=20))
    for i in range(12):  # a line a file
        log.write(_line(i, pad=100))
    assert len(rotated_files(path)) == 11
    assert _events(_reader(path).read_new()) == [f"e{i}" for i in range(12)]


def _read_one_line(tmp_path: Path, keep: int) -> tuple[LogFile, logview.Reader]:
    """A log of one line a file, and a reader that has read its first line."""
    path = tmp_path / "orchestrator.log"
    log = LogFile(path, Rotation(max_bytes=300, keep=keep))
    reader = _reader(path)
    log.write(_line(0, pad=100))
    assert _events(reader.read_new()) == ["e0"]
    return log, reader


def test_a_reader_follows_the_file_through_rotations_between_reads(tmp_path: Path) -> None:
    log, reader = _read_one_line(tmp_path, keep=10)
    for i in range(1, 8):  # several rotations: the file read last is now a rotated one
        log.write(_line(i, pad=100))
    assert _events(reader.read_new()) == [f"e{i}" for i in range(1, 8)]
    assert reader.read_new() == []
    log.write(_line(8, pad=100))
    assert _events(reader.read_new()) == ["e8"]


def test_a_reader_whose_file_was_rotated_out_goes_on_with_the_current(tmp_path: Path) -> None:
    log, reader = _read_one_line(tmp_path, keep=1)
    for i in range(1, 10):
        log.write(_line(i, pad=100))
    # e0's file is gone; what was kept of the rest is read, nothing twice
    got = _events(reader.read_new())
    assert got == sorted(set(got), key=got.index) and got[-1] == "e9"
    assert "e0" not in got


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(st.one_of(st.integers(min_value=0, max_value=400), st.just(-1)), max_size=80))
def test_any_interleaving_of_writes_rotations_and_reads_reads_each_line_once(
    tmp_path_factory: pytest.TempPathFactory, steps: list[int]
) -> None:
    """A step >= 0 writes a line padded by that many bytes (in two pieces sometimes: the reader
    sees half a line); -1 reads. Every line written is read once, in order."""
    path = tmp_path_factory.mktemp("rot") / "orchestrator.log"
    log = LogFile(path, Rotation(max_bytes=700, keep=1000))
    reader = _reader(path)
    read: list[str] = []
    n = 0
    for step in steps:
        if step < 0:
            read += _events(reader.read_new())
            continue
        line = _line(n, pad=step)
        n += 1
        if step % 2:  # the writer's line in two writes: a reader between them sees half
            half = len(line) // 2
            log.write(line[:half])
            read += _events(reader.read_new())
            log.write(line[half:])
        else:
            log.write(line)
    log.close()
    read += _events(reader.read_new())
    assert read == [f"e{i}" for i in range(n)]


def test_a_file_truncated_in_place_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "orchestrator.log"
    path.write_bytes(_line(0) + _line(1))
    reader = _reader(path)
    assert _events(reader.read_new()) == ["e0", "e1"]
    with path.open("r+b") as fh:  # logrotate's copytruncate
        fh.truncate(0)
    with path.open("ab") as fh:
        fh.write(_line(2))
    assert _events(reader.read_new()) == ["e2"]
    assert os.stat(path).st_size == len(_line(2))


def test_a_detached_file_lets_go_of_its_descriptor_and_drops_writes(tmp_path: Path) -> None:
    path = tmp_path / "orchestrator.log"
    log = LogFile(path, Rotation(max_bytes=0, keep=0))
    fd = log.fileno()
    log.write(b"before\n")
    log.detach()
    with pytest.raises(OSError):
        os.fstat(fd)
    log.write(b"after\n")
    assert path.read_bytes() == b"before\n"


def test_a_new_file_under_the_reused_inode_of_the_one_read_last_is_read(tmp_path: Path) -> None:
    """The kernel gives a deleted file's inode to the next file created: after e0's file was
    rotated out, the new log may carry its inode (seen under load). Forced here by handing the
    reader the new file's inode, as a reuse would."""
    log, reader = _read_one_line(tmp_path, keep=1)
    for i in range(1, 10):
        log.write(_line(i, pad=100))
    reader.inode = (tmp_path / "orchestrator.log").stat().st_ino
    got = _events(reader.read_new())
    assert got == sorted(set(got), key=got.index) and got[-1] == "e9"
    assert "e0" not in got
