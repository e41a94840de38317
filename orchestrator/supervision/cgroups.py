"""The daemon's side of per-agent cgroups (the agent's side: `agent_process/limits.py`).

Where the daemon's own cgroup v2 directory is delegated to it (systemd `Delegate=yes` with a
writable cgroupfs: the generated unit's `ProtectControlGroups=yes` keeps it read-only), each
agent moves into a cgroup of its own that carries its `Agent.spec.limits` (memory.max, pids.max,
cpu.max). cgroup v2 hands controllers to child cgroups only from a cgroup that holds no process
itself, so `prepare` runs before anything is forked: the daemon moves into a leaf
`<own>/orchestrator` (the fork server is then forked there, and cold children start there)
and enables the memory, pids and cpu controllers in `<own>`, which becomes the parent of the
agents' cgroups (`LaunchSettings.cgroup`). When another process shares the daemon's cgroup,
nothing is changed and agents keep their rlimits only. `remove` deletes an agent's cgroup once
the agent has exited.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import structlog

from protocol.cgroupfs import marked_delegated, own_cgroup
from protocol.launch import agent_cgroup

log = structlog.get_logger("goondan.cgroups")

LEAF = "orchestrator"
CONTROLLERS = ("memory", "pids", "cpu")


def delegated(directory: Path) -> bool:
    """systemd marks a delegated cgroup with a `trusted.delegate` or `user.delegate` xattr; a
    cgroup owned by a non-root daemon was delegated to it by whoever chowned it. It must also
    be writable and have `cgroup.kill` (Linux 5.14)."""
    files = [directory / n for n in ("cgroup.procs", "cgroup.subtree_control", "cgroup.kill")]
    if not all(f.exists() and os.access(f, os.W_OK) for f in files):
        return False
    return marked_delegated(directory)


def prepare(own: Path | None = None, pid: int | None = None) -> Path | None:
    """Make `own` (default: our cgroup) the parent of the agents' cgroups; None where it is
    not delegated to us or another process shares it. Call before forking anything."""
    own = own_cgroup() if own is None else own
    pid = os.getpid() if pid is None else pid
    if own is None or not delegated(own):
        return None
    try:
        if (own / "cgroup.procs").read_text().split() != [str(pid)]:
            log.info("cgroups_shared", cgroup=str(own), agents="rlimits only")
            return None
        available = set((own / "cgroup.controllers").read_text().split())
        leaf = own / LEAF
        leaf.mkdir(exist_ok=True)
        (leaf / "cgroup.procs").write_text(str(pid))
    except OSError as exc:
        log.warning("cgroups_unavailable", cgroup=str(own), error=str(exc))
        return None
    wanted = " ".join(f"+{c}" for c in CONTROLLERS if c in available)
    try:
        if wanted:
            (own / "cgroup.subtree_control").write_text(wanted)
    except OSError as exc:
        log.warning("cgroups_unavailable", cgroup=str(own), error=str(exc))
        with contextlib.suppress(OSError):
            (own / "cgroup.procs").write_text(str(pid))
            leaf.rmdir()
        return None
    log.info("cgroups", parent=str(own), controllers=wanted.replace("+", "").split())
    return own


def remove(parent: Path, pid: int) -> None:
    """After an agent's exit: its cgroup goes, with whatever per-call cgroup a tool left inside
    (their processes are killed first). Best effort: a busy one is left, empty once they die."""
    path = Path(agent_cgroup(str(parent), pid))
    if not path.is_dir():
        return
    with contextlib.suppress(OSError):
        (path / "cgroup.kill").write_text("1")
    inner = sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
    for directory in [*inner, path]:
        with contextlib.suppress(OSError):
            directory.rmdir()
