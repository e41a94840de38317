"""The fork server's C-heap filling: after it, a new C allocation comes from the heap's top (a
fresh page), not from a free chunk among the shared ones."""

from __future__ import annotations

import subprocess
import sys

import pytest

from agent_process.forkprep import mallocfill

PROBE = """
import ctypes, sys
from agent_process.forkprep import mallocfill
libc = mallocfill._glibc()
if libc is None:
    print("none")
    sys.exit(0)
free = ctypes.CDLL(None).free
free.argtypes = [ctypes.c_void_p]
# holes all over the heap, as imports and a rehearsal leave them: every other chunk freed
chunks = [libc.malloc(size) for size in (40, 300, 1000, 5000) * 500]
for at in chunks[::2]:
    free(at)
before = mallocfill.free_below_top()
if sys.argv[1] == "fill":
    assert mallocfill.fill() > 0
    assert mallocfill.fill() == 0  # once: a reload's holes stay (see the module)
after = mallocfill.free_below_top()
top = libc.top()
new = [libc.malloc(size) for size in (24, 200, 1000, 3000, 20000)]
print(before, after, sum(at < top for at in new))
"""


def _probe(step: str) -> list[str]:
    # a fresh interpreter: the heap of this test process is not the fork server's
    return subprocess.run(
        [sys.executable, "-c", PROBE, step], capture_output=True, text=True, timeout=60,
        check=True,
    ).stdout.split()  # fmt: skip


def test_after_the_filling_new_c_allocations_come_from_the_top() -> None:
    out = _probe("fill")
    if out == ["none"]:
        pytest.skip("not glibc 2.33+: the step does nothing")
    before, after, below_top = map(int, out)
    assert before > 400_000  # the holes were there (half the 40- and 1,000-byte chunks)
    assert after == 0  # no free chunk left below the top
    assert below_top == 0  # each new allocation past the shared pages


def test_without_it_new_c_allocations_land_in_the_holes() -> None:
    out = _probe("none")
    if out == ["none"]:
        pytest.skip("not glibc 2.33+: the step does nothing")
    assert int(out[2]) > 0  # what the filling prevents: the probe has teeth


def test_elsewhere_it_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mallocfill, "_glibc", lambda: None)
    assert mallocfill.fill() == 0
    assert mallocfill.free_below_top() is None
