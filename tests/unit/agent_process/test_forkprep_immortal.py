"""The fork server's objects made immortal: a forked child that reads them copies no pages.

Each probe runs in its own interpreter: an immortal object is never freed, not something to
do to the test process."""

from __future__ import annotations

import subprocess
import sys

import pytest

from agent_process.forkprep import immortal

pytestmark = pytest.mark.skipif(
    immortal.immortal_count() is None, reason="immortal objects: CPython 3.12+ only"
)

FORKED = """
import os, resource, sys
from agent_process.forkprep import immortal
data = [{"name": "x" * 40 + str(i), "values": [i, str(i)]} for i in range(40_000)]
if sys.argv[1] == "immortal":
    assert immortal.make_all_immortal() > 40_000
    assert immortal.make_all_immortal() == 0  # once per process
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    held = [(d["name"], d["values"][1]) for d in data]  # a reference to each: counts written
    after = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    os.write(w, str(after - before).encode())
    os._exit(0)
os.waitpid(pid, 0)
print(os.read(r, 64).decode())
"""


def _child_faults(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", FORKED, mode], capture_output=True, text=True, timeout=60,
        check=True,
    )  # fmt: skip
    return int(out.stdout)


def test_a_forked_child_reading_immortal_objects_copies_far_fewer_pages() -> None:
    mortal, immortal_ = _child_faults("mortal"), _child_faults("immortal")
    # 40,000 dicts, strings and lists over ~10 MiB: each read one copies its page when mortal;
    # immortal, only the child's own new list and tuples fault
    assert immortal_ * 3 < mortal, (immortal_, mortal)


COUNTS = """
import gc, sys
from agent_process.forkprep import immortal
class Thing:
    pass
thing = Thing()
thing.text = "not interned " * 3
gc.collect()
immortal.make_all_immortal()
before = (sys.getrefcount(thing), sys.getrefcount(thing.text), sys.getrefcount(Thing))
more = [thing, thing.text, Thing] * 10
after = (sys.getrefcount(thing), sys.getrefcount(thing.text), sys.getrefcount(Thing))
new = object()
print(before == after, sys.getrefcount(new) < 10)
"""


def test_references_no_longer_change_the_counts_of_what_existed_and_new_objects_are_mortal() -> (
    None
):
    out = subprocess.run(
        [sys.executable, "-c", COUNTS], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.split() == ["True", "True"]
