"""Fill the free blocks of the fork server's small-object heap before it forks children.

CPython's allocator (pymalloc) serves a small object from the partly used pools of its size
class first. After imports and the warm-up, the fork server's pools hold free blocks scattered
over many pages; a forked child's first objects of each size land in them, and every page
written becomes the child's private copy, for an object or two. Taking those blocks here, by
objects the fork server keeps, makes a child's new objects start in fresh pools instead,
packed into pages it owns anyway.

A pool is 16 KiB (CPython 3.11, 64-bit); a fresh pool hands out its blocks in order from 48
bytes in. Per size class, objects are taken until such a pool is full and one more object
opens the next pool at its start: the used pools had no free block left then, and a child's
objects of that size go to that last pool (one page shared, the rest untouched). Only memory
of this process is touched: nothing is opened, started or written. Bounded in all (TOTAL)
and skipped under another allocator.
"""

from __future__ import annotations

import gc
import itertools
import os
from collections.abc import Callable

POOL_SIZE = 16 * 1024
FIRST_BLOCK = 48
"""Offset of a fresh pool's first block: sizeof(pool_header) rounded up to 16."""
SIZES = range(32, 513, 16)
"""Block sizes served by pymalloc that a bytes or float object can take (16 is too small)."""
PER_SIZE = 4096
"""At most this many objects per size class and round, whatever the heap looks like."""
ROUNDS = 4
TOTAL = 32 * 1024
"""At most this many objects in all (~2 MiB if the heap is not laid out as expected: the
small sizes come first); a usual fork server takes ~6k."""
FLOAT_SIZE = 32
BYTES_HEADER = 33
"""sys.getsizeof(b"") on 3.11: a bytes object of n bytes asks for 33 + n."""

_held: list[object] = []
"""The filling objects of the last `fill()`, kept until the next one (children share them)."""


def fill() -> int:
    """Take the free blocks of every size class; returns how many objects that took.

    A second call (after a reload) first lets the previous filling go: its blocks are free
    again and taken anew with the holes the reload left, so the fork server does not grow
    by a filling per reload."""
    _held.clear()
    if os.environ.get("PYTHONMALLOC", "pymalloc") != "pymalloc":
        return 0  # another allocator (or pymalloc's debug hooks): nothing of this applies
    gc.collect()  # the garbage collected later would leave new holes
    slots: list[object] = [None] * TOTAL  # never grows
    n = 0
    for size in SIZES:
        n = _fill_size(_maker(size), size, slots, n)
    _held[:] = slots[:n]
    del slots
    return n


def _fill_size(make: Callable[[], object], size: int, slots: list[object], n: int) -> int:
    """Objects of one size until one lands at the start of a pool no object used yet: the
    used pools had no free block left then."""
    if size == FLOAT_SIZE:  # a float's every check makes ints of its size: one bounded run
        return _fill_pool_run(make, size, slots, n)
    for _ in range(ROUNDS):
        n = _fill_pool_run(make, size, slots, n)
        if n == len(slots):
            break
        probe = slots[n] = make()
        n += 1
        if id(probe) % POOL_SIZE == FIRST_BLOCK:
            break  # else a free block a recycled pool still had: fill on
    return n


def _fill_pool_run(make: Callable[[], object], size: int, slots: list[object], n: int) -> int:
    """Objects until a pool handing out its blocks in order from its start is full (a fresh
    pool does that; so may a recycled one whose blocks were freed in order)."""
    last = FIRST_BLOCK + ((POOL_SIZE - FIRST_BLOCK) // size - 1) * size
    pool, offset = -1, 0
    for _ in range(min(PER_SIZE if size != FLOAT_SIZE else PER_SIZE // 4, len(slots) - n)):
        obj = slots[n] = make()
        n += 1
        address = id(obj)
        at = address % POOL_SIZE
        if at == FIRST_BLOCK:
            pool, offset = address // POOL_SIZE, at
        elif address // POOL_SIZE == pool and at > offset:
            offset = at
            if at == last:
                break
        else:
            pool = -1  # not a pool filling in order: a used pool's free block
    return n


def _maker(size: int) -> Callable[[], object]:
    """A constructor of new objects whose block is exactly `size` bytes, no temporaries."""
    if size == FLOAT_SIZE:  # a float (24 bytes): each addition makes a new one
        counter = itertools.count(0.5)
        return lambda: next(counter)
    length = size - BYTES_HEADER
    return lambda: bytes(length)
