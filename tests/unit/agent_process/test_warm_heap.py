"""The fork server's heap filling: a new object after it opens a pool of its own."""

from __future__ import annotations

import sys

import pytest

from agent_process import warm_heap


@pytest.fixture(autouse=True)
def _drop_held() -> None:
    warm_heap._held.clear()


def test_after_the_filling_a_new_object_starts_a_fresh_pool() -> None:
    sizes = range(304, 513, 16)  # sizes the interpreter itself rarely asks for in between
    assert sys.getsizeof(b"") == warm_heap.BYTES_HEADER
    assert warm_heap.fill() > 0
    new = [bytes(size - warm_heap.BYTES_HEADER) for size in sizes]
    offsets = [id(obj) % warm_heap.POOL_SIZE for obj in new]
    # without the filling they land in the free blocks of used pools, anywhere in them
    assert offsets == [warm_heap.FIRST_BLOCK] * len(sizes)
    warm_heap._held.clear()


def test_the_filling_objects_are_kept() -> None:
    taken = warm_heap.fill()
    assert sum(len(held) for held in warm_heap._held) == taken
    warm_heap._held.clear()
