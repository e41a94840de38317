"""The fork server's heap filling: a new object after it opens a pool of its own."""

from __future__ import annotations

import subprocess
import sys

import pytest

from agent_process.forkprep import heap


@pytest.fixture(autouse=True)
def _drop_held() -> None:
    heap._held.clear()


PROBE = """
import sys
from agent_process.forkprep import heap
sizes = range(304, 513, 16)  # sizes the interpreter itself rarely asks for in between
assert sys.getsizeof(b"") == heap.BYTES_HEADER
assert heap.fill() > 0
new = [bytes(size - heap.BYTES_HEADER) for size in sizes]
offsets = [id(obj) % heap.POOL_SIZE - heap.FIRST_BLOCK for obj in new]
print(*[offset // size for offset, size in zip(offsets, sizes, strict=True)])
"""


def test_after_the_filling_a_new_object_goes_to_a_pool_of_its_own() -> None:
    # in a fresh interpreter, as in the fork server: the heap left by other tests in this
    # process has pools freed out of order, which the filling does not promise to handle
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    blocks = [int(word) for word in out.split()]
    # in the first blocks of the pool the filling opened last; without the filling they land
    # in the free blocks of used pools, anywhere in them (1 or 2 of 14 in the first 8)
    assert len(blocks) == 14
    assert sum(block < 8 for block in blocks) >= len(blocks) - 2, blocks


def test_the_filling_objects_are_kept_until_the_next_filling() -> None:
    taken = heap.fill()
    assert len(heap._held) == taken
    again = heap.fill()  # e.g. after a reload: the previous filling is let go first
    assert len(heap._held) == again  # not taken + again
    heap._held.clear()


def test_a_heap_not_laid_out_as_expected_costs_a_bounded_filling(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # blocks are 16-byte aligned: no object is ever seen at an offset of 8
    monkeypatch.setattr(heap, "FIRST_BLOCK", 8)
    assert heap.fill() == heap.TOTAL
    monkeypatch.setenv("PYTHONMALLOC", "malloc")
    assert heap.fill() == 0
    heap._held.clear()
