"""Hand the C heap's free pages back to the kernel now and then (glibc's `malloc_trim`).

The daemon allocates and frees per event and per instance (frames, decoded events, journal
rows, log lines). Its live objects stay flat, but glibc keeps the freed blocks in its heap, so
the RSS crept up with every instance driven (`bench_instances`, after the bounded caches
filled) with nothing growing. `malloc_trim(0)` returns free pages, from the middle of the heap
too, and the daemon's RSS per instance driven stays flat (`bench_instances` prints it). The
reconciler calls `trim` every 10 s in a worker thread (a trim of a fragmented heap takes
milliseconds, so it stays off the event loop, and the sawtooth between trims stays small).
Without glibc (musl) there is nothing to call.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable

EVERY_S = 10.0


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        fn: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    return fn


def trim() -> bool:
    """Return the heap's free pages to the kernel; False where libc has no `malloc_trim`."""
    fn = _malloc_trim()
    if fn is None:
        return False
    fn(0)
    return True
