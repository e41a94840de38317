"""Take the free chunks of the fork server's C heap (glibc malloc) before it forks children.

What pymalloc does not serve (objects over 512 bytes: code objects, types, dict tables, big
lists; C extensions' own buffers) comes from glibc's heap. After imports, the bundle's load and
the rehearsal, that heap holds free chunks scattered among live ones (its bins and the
thread's cache). A forked child's first C allocations take them: malloc writes each chunk's
header, and the caller fills it, so every page they sit on becomes the child's private copy
(a copy-on-write fault, a 4 KiB copy and a TLB flush). `bench_instances` counted ~170 of a new
agent's ~860 page faults there (`perf record -e page-faults -d`: malloc, _int_malloc, memset).

Taking those chunks here, with allocations the fork server keeps and never frees, leaves a
child nothing but the heap's top: its allocations are packed into fresh pages past the shared
ones (a zero-filled page, no copy). Per size class, from large to small, chunks are taken until
one comes from the top, i.e. no free chunk of that size or larger is left; the smallest classes
are glibc's per-thread cache (tcache), which hands out its chunks first. Only glibc has the
calls used here (`mallinfo2`, 2.33+); elsewhere nothing is done. Memory taken: the free chunks
(a few hundred KiB in a usual fork server) and one chunk per size class from the top, for the
fork server's life. Only the first preparation fills (like the immortal step): a filling after
each reload took what the reload freed and the fork server grew by ~0.3 MiB a reload, steadily
(tests/integration/test_forkserver_memory.py); even freeing the last filling first did not stop
it. After a reload, a child's C allocations may land in the holes the reload left, as before.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from dataclasses import dataclass

SIZES = (65536, 16384, 4096, *(16 * k + 8 for k in range(64, 0, -1)))
"""Request sizes, large to small: below glibc's mmap threshold (128 KiB at least: larger
requests never come from the heap), then each of the 64 tcache size classes (24 to 1,032 bytes
asked, 32 to 1,040-byte chunks), whose cache is drained only by requests of its own size."""
TCACHE_COUNT = 7
"""Chunks glibc's per-thread cache holds per size class by default (not in `mallinfo2`)."""


_done: list[bool] = []


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd",
            "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
        )
    ]  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Glibc:
    malloc: Callable[[int], int | None]
    sbrk: Callable[[int], int | None]
    mallinfo2: Callable[[], _MallInfo2]

    def top(self) -> int:
        """Where the heap's top chunk starts: a chunk at or past it came from the top (the
        main arena is contiguous and ends at the program break)."""
        end = self.sbrk(0) or 0
        return end - int(self.mallinfo2().keepcost)


@functools.cache
def _glibc() -> _Glibc | None:
    try:
        libc = ctypes.CDLL(None)
        malloc, sbrk, mallinfo2 = libc.malloc, libc.sbrk, libc.mallinfo2
    except (OSError, AttributeError):
        return None  # not glibc, or one older than 2.33
    malloc.restype, malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    sbrk.restype, sbrk.argtypes = ctypes.c_void_p, [ctypes.c_ssize_t]
    mallinfo2.restype, mallinfo2.argtypes = _MallInfo2, []
    return _Glibc(malloc, sbrk, mallinfo2)


def fill() -> int:
    """Once per process: take every free chunk of the C heap; returns how many chunks that
    took (0: not glibc, or a second call)."""
    libc = _glibc()
    if libc is None or _done:
        return 0
    _done.append(True)
    # a bound on the bytes taken, whatever the heap is like (e.g. not contiguous, where a
    # chunk from the top is not seen as such): what is free, one chunk per class from the
    # top, and a full cache
    budget = (free_below_top() or 0) + sum(SIZES) * (TCACHE_COUNT + 1)
    taken = 0
    for size in SIZES:
        top = libc.top()
        while budget >= size:
            at = libc.malloc(size)
            if at is None:
                break
            taken += 1
            budget -= size
            if at >= top:
                break  # none of this size (or larger) is left below the top
    return taken


def free_below_top() -> int | None:
    """Bytes in the C heap's free chunks (tcache aside), the top excluded; None: not glibc."""
    libc = _glibc()
    if libc is None:
        return None
    info = libc.mallinfo2()
    return int(info.fordblks - info.keepcost)
