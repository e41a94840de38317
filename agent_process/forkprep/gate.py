"""Which preparation steps the fork server runs on this Python: the measured ones only.

The steps rest on details of CPython that change between versions: when a function's bytecode
is rewritten by the specializing interpreter (3.11 quickens after a few calls, 3.12 and later
at creation and then specialize on use), which objects are immortal (3.12), how the small-object
allocator lays out its pools. A step runs on the versions where `tests/bench/bench_spawn.py`
measured it to make an idle agent (or one that served an event) smaller by more than the
run-to-run noise; on the others, and on a version nobody measured yet, it is skipped.

`GOONDAN_FORK_WARM=0` (or `false`, `no`, `off`) turns every step off: the fork server then only
imports the runtime and holds the bundle. A comma-separated list of step names
(`GOONDAN_FORK_WARM=start,heap`) runs exactly those, on any version: what the measurements use.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from enum import StrEnum

ENV = "GOONDAN_FORK_WARM"
OFF = frozenset({"0", "false", "no", "off"})
ON = frozenset({"", "1", "true", "yes", "on"})


class Step(StrEnum):
    SHARE = "share"
    """Build once what each child would build for itself: compiled entry files, checked tool
    schemas, the built-in tools' modules and registry entries, each model's client."""
    START = "start"
    """Rehearse a child's start on the real code (`rehearsal`)."""
    TURN = "turn"
    """Rehearse a turn on that child, from the event frame to the reply and status frames."""
    HEAP = "heap"
    """Take the free blocks of the small-object heap (`heap`; pymalloc only)."""
    IMMORTAL = "immortal"
    """Make the fork server's objects immortal (`immortal`; 3.12+): a child's reference
    counting no longer copies their pages."""
    TYPES = "types"
    """Give every class its attribute-cache version tag (`typetags`): a child's first lookup
    on a class no longer writes the class's page."""
    MALLOC = "malloc"
    """Take the free chunks of the C heap (`mallocfill`; glibc only): a child's C allocations
    go to fresh pages instead of copying shared ones."""


Version = tuple[int, int]
MEASURED: dict[Step, frozenset[Version] | None] = {
    Step.SHARE: None,  # data shared instead of copied: not a property of the interpreter
    Step.START: frozenset({(3, 11), (3, 12), (3, 13)}),
    Step.TURN: frozenset({(3, 11), (3, 12), (3, 13)}),
    Step.HEAP: frozenset({(3, 11), (3, 12), (3, 13)}),
    Step.IMMORTAL: frozenset({(3, 13)}),
    Step.TYPES: frozenset({(3, 13)}),
    Step.MALLOC: None,  # glibc's heap, whatever the interpreter (measured on 3.13)
}
"""The CPython versions each step was measured to pay on (None: any version). Each step, left
out alone, made the agents bigger on 3.11, 3.12 and 3.13 alike (the figures are in the commit
that set this table); `turn` pays only once an agent served an event."""


def steps(
    env: Mapping[str, str] = os.environ,
    version: Version = (sys.version_info.major, sys.version_info.minor),
    implementation: str = sys.implementation.name,
) -> frozenset[Step]:
    """The steps to run; unknown names in a list are ignored (the fork server must start)."""
    wanted = env.get(ENV, "").strip().lower()
    if wanted in OFF:
        return frozenset()
    if wanted not in ON:
        names = {name.strip() for name in wanted.split(",")}
        return frozenset(step for step in Step if step.value in names)
    return frozenset(
        step
        for step, versions in MEASURED.items()
        if versions is None or (implementation == "cpython" and version in versions)
    )
