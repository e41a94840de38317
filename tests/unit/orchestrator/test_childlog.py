"""A child's output through the daemon's reader: lines joined before masking, long lines cut
with a marker (a secret at the cut masked whole), the partial last line written at EOF."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from bundles import redact
from orchestrator.supervision import childlog
from orchestrator.supervision.childlog import ChildOutput, ChildOutputs, cut_marker
from orchestrator.supervision.logfiles import Rotation, rotated_files

SECRET = "tok-0123456789abcdef"


@pytest.fixture(autouse=True)
def installed() -> Iterator[None]:
    redact.install([SECRET])
    yield
    redact.install([])


async def _run(chunks: list[bytes], tmp_path: Path, max_line: int = 64) -> bytes:
    """Write `chunks` one `os.write` each into a real pipe, close it, read the log."""
    log = tmp_path / "child.log"
    async with asyncio.timeout(10):
        output, write_fd = ChildOutput.open(log, max_line=max_line)
        for chunk in chunks:
            os.write(write_fd, chunk)
            await asyncio.sleep(0)  # the reader may take each piece alone
        os.close(write_fd)
        await output.closed
    return log.read_bytes()


async def test_a_secret_in_pieces_is_masked_once_the_line_is_whole(tmp_path: Path) -> None:
    half = len(SECRET) // 2
    text = await _run(
        [f"key={SECRET[:half]}".encode(), f"{SECRET[half:]} port=8794\nnext\n".encode()],
        tmp_path,
    )
    assert text == b"key=*** port=8794\nnext\n"


async def test_a_partial_last_line_is_written_at_eof(tmp_path: Path) -> None:
    assert await _run([b"done\n", f"half {SECRET}".encode()], tmp_path) == b"done\nhalf ***\n"


async def test_a_long_line_is_cut_with_a_marker(tmp_path: Path) -> None:
    text = await _run([b"a" * 200 + b"\n", b"short\n"], tmp_path, max_line=64)
    assert text == b"a" * 64 + cut_marker(136) + b"short\n"


async def test_an_endless_line_is_cut_as_it_comes_and_memory_stays_bounded(
    tmp_path: Path,
) -> None:
    chunks = [b"b" * 50] * 40 + [b"tail\n", b"after\n"]
    text = await _run(chunks, tmp_path, max_line=64)
    assert text == b"b" * 64 + cut_marker(40 * 50 + 4 - 64) + b"after\n"


async def test_a_secret_across_the_cut_is_masked_whole(tmp_path: Path) -> None:
    line = b"x" * 60 + SECRET.encode() + b"y" * 100
    for chunks in ([line + b"\n"], [line[:62], line[62:70], line[70:] + b"\n"]):
        text = await _run(chunks, tmp_path, max_line=64)
        assert SECRET[:4].encode() not in text
        assert text.startswith(b"x" * 60 + b"***")
        (tmp_path / "child.log").unlink()


async def test_outputs_close_what_a_stray_process_holds_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(childlog, "CLOSE_SECONDS", 0.01)
    async with asyncio.timeout(10):
        outputs = ChildOutputs()
        write_fd = outputs.open(tmp_path / "held.log")
        os.write(write_fd, b"no newline yet")
        await asyncio.sleep(0)
        # the writer never closes its end: close() gives up after its wait and flushes
        await outputs.close()
        os.close(write_fd)
    assert (tmp_path / "held.log").read_bytes() == b"no newline yet\n"


async def test_a_childs_log_rotates_between_lines_never_inside_a_cut_one(tmp_path: Path) -> None:
    log = tmp_path / "a.k.log"
    lines = [f"line {i} ".encode() + b"z" * (i % 40) + b"\n" for i in range(30)]
    async with asyncio.timeout(10):
        output, write_fd = ChildOutput.open(log, max_line=64, rotation=Rotation(100, keep=50))
        for line in lines[:15]:
            os.write(write_fd, line)
            await asyncio.sleep(0)
        for _ in range(6):  # an endless line: its head is written, then its marker at its end
            os.write(write_fd, b"e" * 50)
            await asyncio.sleep(0)
        os.write(write_fd, b"\n")
        for line in lines[15:]:
            os.write(write_fd, line)
            await asyncio.sleep(0)
        os.close(write_fd)
        await output.closed
    files = [*rotated_files(log), log]
    assert len(files) > 5
    cut = b"e" * 64 + cut_marker(300 - 64)
    assert b"".join(p.read_bytes() for p in files) == b"".join([*lines[:15], cut, *lines[15:]])
    assert any(cut in p.read_bytes() for p in files)  # not split across two files
    assert all(p.read_bytes().endswith(b"\n") for p in files)
