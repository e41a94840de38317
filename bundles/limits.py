"""`Agent.spec.limits`: sizes parsed and values checked, before anything is applied.

Pure: the agent process applies what `resolved` returns (`agent_process.limits`); `problems`
gives `bundles.validate` one coded diagnostic per bad field.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from bundles.kinds import AgentLimits

MIN_MEMORY = 128 << 20
"""An agent forked from the fork server already has tens of MiB of private writable memory
(and a stack per thread): less than this would not let it start (`bench_spawn` measures what
an idle agent uses)."""
MIN_OPEN_FILES = 32
"""The agent's own sockets, pipes and files need about 20."""
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(Ki|Mi|Gi|Ti|k|K|M|G|T)?\s*$")
_UNITS = {
    None: 1, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
    "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40,
}  # fmt: skip


def parse_size(value: int | str) -> int:
    """Bytes from an int or a size ("512Mi", "1.5G", "1000000"); ValueError otherwise."""
    if isinstance(value, int):
        return value
    match = _SIZE.match(value)
    if match is None:
        raise ValueError(f"{value!r} is not a size")
    number, unit = match.groups()
    return int(float(number) * _UNITS[unit])


@dataclass(frozen=True, slots=True)
class Limits:
    """`AgentLimits` with the memory in bytes."""

    memory: int | None = None
    cpu_seconds: int | None = None
    open_files: int | None = None
    processes: int | None = None
    cpus: float | None = None

    def __bool__(self) -> bool:
        return any(v is not None for v in (self.memory, self.cpu_seconds, self.open_files,
                                            self.processes, self.cpus))  # fmt: skip


NO_LIMITS = Limits()


def resolved(limits: AgentLimits) -> Limits:
    """The limits to apply; call `problems` first (a bad size raises ValueError here)."""
    return Limits(
        memory=parse_size(limits.memory) if limits.memory is not None else None,
        cpu_seconds=limits.cpu_seconds,
        open_files=limits.open_files,
        processes=limits.processes,
        cpus=limits.cpus,
    )


def problems(limits: AgentLimits) -> list[tuple[str, str]]:
    """(field, what is wrong) for each bad field, in field order."""
    found: list[tuple[str, str]] = []
    if limits.memory is not None:
        try:
            size = parse_size(limits.memory)
        except ValueError:
            found.append(("memory", f"memory {limits.memory!r} is not a size (e.g. 512Mi, 2G)"))
        else:
            if size < MIN_MEMORY:
                found.append(("memory", f"memory {limits.memory!r} is below 128Mi"))
    for field, value, least in (
        ("cpuSeconds", limits.cpu_seconds, 1),
        ("openFiles", limits.open_files, MIN_OPEN_FILES),
        ("processes", limits.processes, 1),
    ):
        if value is not None and value < least:
            found.append((field, f"{field} must be at least {least}, got {value}"))
    if limits.cpus is not None and not (math.isfinite(limits.cpus) and limits.cpus > 0):
        found.append(("cpus", f"cpus must be more than 0, got {limits.cpus}"))
    return found
