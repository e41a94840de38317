"""The CPU floor of a process per instance: a fork of a process prepared as the fork server is,
before any agent code runs (issue 33's goal of ≤ 5 ms of CPU per new instance, all processes).

This process loads the one-agent echo bundle of `bench_instances`, runs the fork server's own
preparation on it (`agent_process.forkprep.preload`: the imports, the shared builds, the
rehearsed start and turn, the heap steps) and freezes the collector, as the fork server does.
Then it forks CHILDREN children each way, one at a time:

- `fork -> exit`: the child exits at once (`os._exit`): a fork and an exit, nothing else;
- `fork -> a loop's round trip -> exit`: the child starts a uvloop loop, says `ready` over a
  unix socket pair and waits for the answer, then exits: the least a child that hears from the
  daemon does (an agent also connects, reads its launch, starts its runtime, runs the turn and
  stores it).

Each row is CPU per child: the forking process's (its process time around the fork and the
reap) plus the child's own (wait4's rusage: the kernel's exact runtime, user and system). What
the daemon does for a new instance (accept, journal, route, ask for the spawn, make room) comes
on top, as does all of the agent's work.
"""

from __future__ import annotations

import gc
import os
import socket
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tests.bench.baselines import Row, p99, print_rows
from tests.bench.scale_clients import echo_bundle

CHILDREN = int(os.environ.get("BENCH_FORK_FLOOR_CHILDREN", "300"))


def _anonymous_mib() -> float:
    with open("/proc/self/smaps_rollup") as rollup:
        for line in rollup:
            if line.startswith("Anonymous:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _prepare(directory: Path) -> None:
    """This process made what the fork server is before its first fork."""
    from agent_process import forkprep
    from bundles.loader import load_bundle
    from protocol.launch import LaunchSettings
    from protocol.norich import WithoutRich

    (directory / "goondan.yaml").write_text(echo_bundle("floor", "{maxLiveInstances: 300}"))
    state = directory / "state"
    bundle = load_bundle(directory, state_root=state)
    launch = LaunchSettings(
        endpoint=f"ipc://{directory}/agents.sock", swarm="floor",
        bundle=str(bundle.path), state_root=str(state),
    )  # fmt: skip
    with WithoutRich():
        forkprep.preload(bundle, launch)
    gc.collect()
    gc.freeze()


def _exit_at_once(sock: socket.socket) -> None:
    os._exit(0)


def _round_trip(sock: socket.socket) -> None:
    import asyncio

    import uvloop

    async def main() -> None:
        reader, writer = await asyncio.open_unix_connection(sock=sock)
        writer.write(b"ready\n")
        await writer.drain()
        await reader.readline()
        writer.close()

    uvloop.run(main())
    os._exit(0)


def _forks(child: Callable[[socket.socket], None], answer: bool) -> tuple[list[float], list[float]]:
    """CPU ms per child, the forking process's share and the child's; the child's page faults."""
    spent, faults = [], []
    for _ in range(CHILDREN):
        ours, theirs = socket.socketpair()
        started = time.process_time()
        pid = os.fork()
        if pid == 0:
            ours.close()
            try:
                child(theirs)
            finally:
                os._exit(1)
        theirs.close()
        forked = time.process_time()
        if answer:
            with ours.makefile("rb") as lines:
                lines.readline()
            ours.sendall(b"bye\n")
        waited = time.process_time()
        _, _, usage = os.wait4(pid, 0)
        reaped = time.process_time()
        ours.close()
        parent = (forked - started) + (reaped - waited)
        spent.append((parent + usage.ru_utime + usage.ru_stime) * 1000)
        faults.append(float(usage.ru_minflt))
    return spent, faults


def main() -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="gff") as tmp:
        _prepare(Path(tmp))
        anonymous = _anonymous_mib()
        at_once, _ = _forks(_exit_at_once, answer=False)
        hop, hop_faults = _forks(_round_trip, answer=True)
    rows = [
        Row("anonymous memory of the prepared process (what a fork copies the page tables of)",
            anonymous, None, "MiB"),
        Row("CPU per child: fork -> exit (forking process and child)", statistics.median(at_once),
            p99(at_once), "ms"),
        Row("CPU per child: fork -> a loop's round trip -> exit", statistics.median(hop),
            p99(hop), "ms"),
        Row("  the child's page faults", statistics.median(hop_faults), p99(hop_faults),
            "faults"),
    ]  # fmt: skip
    print_rows(
        f"fork floor: {CHILDREN} children each way of a process prepared as the fork server "
        "(the echo bundle); the goal of a whole new instance, all processes, is ≤ 5 ms",
        rows,
    )
    return rows


if __name__ == "__main__":
    main()
