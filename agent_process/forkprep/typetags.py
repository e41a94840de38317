"""Give every class the fork server holds its attribute-cache version before it forks children.

CPython looks a class's attributes up through a cache keyed by the class's version tag, and a
class gets its tag lazily, at the first lookup that misses the cache: the interpreter then
writes the tag into the class object. A class the fork server never looked an attribute up on
(what only a live child uses: its event loop, its ZeroMQ context and poller, its asyncio
tasks, futures and queues) got its tag in every child, and the write copied the page the
class sits on into that child. `perf record -e page-faults -d` over `bench_instances` put those
writes (`assign_version_tag`) at ~15 of a new agent's ~750 faults, and the pages they land on
hold other objects the child then writes too.

One failed lookup per class, here, assigns the tags (of the class and of its bases). The
lookup goes through `type.__getattribute__`, so no metaclass `__getattr__` (a bundle's code)
runs, and it asks for a name no class has, so no descriptor runs either. A class changed later
gets a new tag at its next lookup, in whichever process changes it, as before.
"""

from __future__ import annotations

import contextlib
import gc
import sys

ABSENT = "__goondan_version_tag_probe__"
"""A name no class defines: the lookup misses, which is what assigns the tag."""


def assign_all() -> int:
    """Look `ABSENT` up on every class found; returns how many classes. Found: the classes
    the collector tracks, the classes of the objects it tracks, and the classes the loaded
    modules name (a C extension's static types, e.g. uvloop's `Loop`, are not tracked)."""
    found: dict[int, type] = {}
    for obj in gc.get_objects():
        kind = type(obj)
        found[id(kind)] = kind
        if isinstance(obj, type):
            found[id(obj)] = obj
    for module in list(sys.modules.values()):
        for value in list(getattr(module, "__dict__", {}).values()):
            if isinstance(value, type):
                found[id(value)] = value
    for cls in found.values():
        with contextlib.suppress(AttributeError):
            type.__getattribute__(cls, ABSENT)
    return len(found)
