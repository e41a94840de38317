"""Make the fork server's objects immortal before it forks children (CPython 3.12+).

Every object a forked child touches gets a reference count written: `Py_INCREF` of a function it
calls, of a global it loads, of an attribute it looks up on a type. Each such write copies the
whole 4 KiB page the object sits on into the child (copy-on-write): most of a new agent's page
faults, and then most of its kernel time, are these copies, and the kernel pays again at exit
to unmap them. `gc.freeze` keeps the collector from writing these pages; it cannot keep the
interpreter from counting references.

CPython 3.12 made some objects immortal (None, small ints, interned strings): their count is
`_Py_IMMORTAL_REFCNT` and `Py_INCREF` / `Py_DECREF` leave it unwritten (PEP 683). This gives
that count to every object the fork server holds at its first preparation: the objects the
collector tracks and, reached from them, the ones it does not (strings, code objects, tuples
of constants). A child then shares these pages for as long as it only reads them.

The price: an immortal object is never freed. These are the fork server's objects for its
whole life (modules, functions, types, the bundle it forked with), with one exception: a
reload replaces the bundle, and the first one's objects stay in the fork server (once: the
later bundles are not made immortal). A child that drops a reference to one of these leaks
nothing it owns. Only the CPython versions whose object header we know (`LAYOUTS`) are
touched; on any other this does nothing.
"""

from __future__ import annotations

import ctypes
import gc
import sys

LAYOUTS = {(3, 12): 0xFFFFFFFF, (3, 13): 0xFFFFFFFF}
"""`_Py_IMMORTAL_REFCNT` per version on a 64-bit build (Include/object.h): `Py_INCREF` skips
an object whose low 32 bits of `ob_refcnt` are all ones, `Py_DECREF` one whose count, as a
32-bit int, is negative. On a little-endian machine those bits are the first 4 bytes of the
object; the high 32 bits of a count below 2**32 are 0 already."""
WORD = 4
BASE = 8
"""Where the word view of memory starts (an address below any object: objects are 8-aligned)."""

_done: list[bool] = []


def immortal_count() -> int | None:
    """The count that makes an object immortal on this interpreter; None: not known here."""
    if sys.implementation.name != "cpython" or sys.maxsize < 2**32 or sys.byteorder != "little":
        return None
    if getattr(sys, "_is_gil_enabled", lambda: True)() is False:
        return None  # a free-threaded build splits the count: another layout
    return LAYOUTS.get((sys.version_info.major, sys.version_info.minor))


def make_all_immortal() -> int:
    """Once per process: give every object reachable from what the collector tracks the
    immortal count; returns how many objects were changed (0 on a second call or where
    `immortal_count` is None)."""
    count = immortal_count()
    if count is None or _done:
        return 0
    _done.append(True)
    gc.collect()  # garbage made immortal could never be collected
    todo = gc.get_objects()
    # every count through one array over the address space, indexed by address: one ctypes
    # object instead of one per object (~3 us each: 0.5 s of the fork server's start)
    words = (ctypes.c_uint32 * (sys.maxsize // WORD)).from_address(BASE)
    changed = 0
    for obj in todo:
        at = (id(obj) - BASE) // WORD
        if words[at] != count:
            words[at] = count
            changed += 1
    # then what they reference that the collector does not track (strings, code, tuples
    # of constants), and what that references in turn; an object already immortal is not
    # walked again, and no set of the objects seen is built (its ints would leave a heap
    # of holes behind)
    while todo:
        found = []
        for ref in gc.get_referents(*todo):
            at = (id(ref) - BASE) // WORD
            if words[at] != count:
                words[at] = count
                changed += 1
                if not gc.is_tracked(ref):
                    found.append(ref)
        todo = found
    return changed
