"""Virtual actors at scale (issue 17): distinct instances through one daemon, one event each.

`make bench-instances` (not in `make bench`, not in CI): GOONDAN_BENCH_INSTANCES instances
(default 1,000,000) u0, u1, ... each get one event through the control socket, IN_FLIGHT at a
time, on a swarm with `maxLiveInstances: 300` (a few hundred live: each new instance makes
room by deactivating the least recently used one). Before that, one instance gets 200 turns of
history and its files are copied to COLD keys the daemon never saw (a hibernated instance is
its files); after it, each of those gets its first event, one at a time (the bound is full,
so that includes deactivating another instance), followed by a round trip to the now-live
instance (the warm baseline). The bare zygote fork -> ready of the same moment is the raw
baseline of a spawn.

Reported: events/s, send -> reply of a new instance, the first event of a hibernated instance
with 200 turns of history (goal ≤ 50 ms p99), disk per hibernated instance (blocks allocated,
directories included, and inodes), the daemon's memory per hibernated instance (its RSS
sampled over the run must be flat once its bounded caches are full: the growth per instance
after `warm_from`), CPU per instance in the daemon, the fork server and the agent process, the
fork server's RSS, and what the daemon's log and journal hold per event (they are not per
instance: the journal keeps finished events 10 minutes, the log is the operator's to rotate).
The state root is a temporary directory on the disk of $TMPDIR (GOONDAN_BENCH_INSTANCES_ROOT
picks another): a million instances take about 20 GB there for the run. CI runs the same
drive, smaller, as tests/bench/test_instances.py.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

from tests.bench.baselines import Row, p99, print_rows, stalls
from tests.bench.instances_driver import HISTORY_TURNS, IN_FLIGHT, LIVE, Drive, drive
from tests.bench.scale_clients import BareZygote

INSTANCES = int(os.environ.get("GOONDAN_BENCH_INSTANCES", "1000000"))
COLD = int(os.environ.get("GOONDAN_BENCH_INSTANCES_COLD", "200"))
BARE_FORKS = 50
KIB = 1024
MIB = 1024 * 1024


WARM = 8192
"""Instances after which the daemon's bounded caches are full (4,096 routing ids and pids of
recent children, the last max(1024, maxLiveInstances) deactivated entries): its RSS grows up
to there by design and must be flat after."""


def warm_from(n: int) -> int:
    """Where the flat part of a run of `n` instances starts: past WARM, and past half the run
    for short runs (at least its second half is judged)."""
    return min(max(WARM, n // 10), n // 2)


def rss_growth(rss: list[tuple[int, float, float]], column: int = 1) -> float:
    """KiB of RSS per 1,000 instances after `warm_from` (least squares): a flat RSS is ~0; a
    daemon that kept a table entry and a mailbox per instance would grow by a few KiB per
    instance, GiBs at a million."""
    points = [(row[0], row[column]) for row in rss if row[0] >= warm_from(rss[-1][0])]
    if len(points) < 2:
        return 0.0
    slope = statistics.linear_regression([p[0] for p in points], [p[1] for p in points]).slope
    return slope * 1000 * KIB


def _row(name: str, values: list[float], unit: str, base: float | None, goal: str = "") -> Row:
    return Row(name, statistics.median(values), p99(values), unit, base, goal, stalls(values))


def rows(run: Drive, bare: list[float], floor_ms: float | None = None) -> list[Row]:
    """The figures of `run`; `bare` (zygote forks) may be empty (CI's run has none);
    `floor_ms` is the CPU of a bare zygote's fork, child and reaping, per child."""
    assert run.disk is not None
    n, disk = run.instances, run.disk
    hibernated = disk.instances
    bare_ms = statistics.median(bare) if bare else None
    warm = statistics.median(run.warm_ms)
    settled = next(r for r in run.rss if r[0] >= warm_from(n))
    events = n + len(run.cold_ms) * 2 + HISTORY_TURNS
    return [
        Row(f"instances driven, one event each (≤ {LIVE} live, {IN_FLIGHT} in flight)", n,
            None, "instances", None, f"{n:,}"),
        Row(f"events/s through one daemon ({run.seconds:.0f} s)", n / run.seconds, None,
            "events/s"),
        *([_row("bare zygote fork -> ready (raw baseline of a spawn)", bare, "ms", None)]
          if bare else []),
        _row("send -> reply, new instance (spawn, turn, room made)", list(run.new_ms), "ms",
             bare_ms),
        _row(f"send -> reply, live instance ({len(run.warm_ms)} samples)", run.warm_ms, "ms",
             warm),
        _row(f"first event of a hibernated instance, {HISTORY_TURNS} turns of history "
             "(baseline: live)", run.cold_ms, "ms", warm, "p99 ≤ 50 ms"),
        Row("disk per hibernated instance, allocated (directories included)",
            disk.allocated / hibernated / KIB, None, "KiB"),
        Row("  apparent bytes per hibernated instance", disk.apparent / hibernated, None, "B"),
        Row("  inodes per hibernated instance", disk.inodes / hibernated, None, "inodes"),
        Row(f"daemon RSS at {settled[0]:,} instances", settled[1], None, "MiB"),
        Row(f"daemon RSS at {n:,} instances (baseline: at {settled[0]:,})", run.rss[-1][1],
            None, "MiB", settled[1]),
        Row(f"daemon memory per hibernated instance (RSS growth after {settled[0]:,})",
            rss_growth(run.rss) / 1000 * KIB, None, "B", None, "≤ 64"),
        Row("daemon RSS at most over the run", max(r[1] for r in run.rss), None, "MiB"),
        Row(f"fork server RSS growth per 1,000 instances after {settled[0]:,}",
            rss_growth(run.rss, 2), None, "KiB"),
        Row("CPU per instance: all processes (baseline: a bare zygote's fork -> ready -> exit, "
            "zygote and child)", sum(run.cpu_ms), None, "ms", floor_ms, "≤ 5 ms"),
        Row("CPU per instance: daemon", run.cpu_ms[0], None, "ms"),
        Row("CPU per instance: fork server", run.cpu_ms[1], None, "ms"),
        Row("CPU per instance: its agent process (fork to exit)", run.cpu_ms[2], None, "ms"),
        Row("  of it the kernel's (system): daemon", run.sys_ms[0], None, "ms"),
        Row("  of it the kernel's (system): fork server", run.sys_ms[1], None, "ms"),
        Row("  of it the kernel's (system): agent process", run.sys_ms[2], None, "ms"),
        Row("page faults per instance: daemon", run.faults[0], None, "faults"),
        Row("page faults per instance: fork server", run.faults[1], None, "faults"),
        Row("page faults per instance: agent process", run.faults[2], None, "faults"),
        Row(f"processes listed by status at most (live {run.most_live} at most)",
            run.most_rows, None, "rows"),
        Row("daemon log per event (orchestrator.log; rotate it)", run.log_bytes / events, None,
            "B"),
        Row("journal on disk at the end (finished events are kept 10 min)",
            run.journal_bytes / MIB, None, "MiB"),
    ]  # fmt: skip


async def _run(directory: Path) -> tuple[Drive, list[float], float]:
    zygote = BareZygote(directory)
    try:
        await zygote.fork()  # its own start is not a fork
        first = zygote.cpu()
        bare = [await zygote.fork() for _ in range(BARE_FORKS // 2)]
        between = zygote.cpu()
        started = time.monotonic()

        def progress(done: int) -> None:
            rate = done / (time.monotonic() - started)
            print(f"  {done:,} / {INSTANCES:,} instances ({rate:.0f}/s)", flush=True)

        run = await drive(directory, INSTANCES, COLD, progress)
        resumed = zygote.cpu()
        bare += [await zygote.fork() for _ in range(BARE_FORKS // 2)]
        last = zygote.cpu()
        floor = statistics.mean([between.per_fork_ms(first), last.per_fork_ms(resumed)])
        return run, bare, floor
    finally:
        zygote.close()


def main() -> list[Row]:
    where = os.environ.get("GOONDAN_BENCH_INSTANCES_ROOT")
    with tempfile.TemporaryDirectory(prefix="gbi", dir=where) as tmp:
        run, bare, floor = asyncio.run(_run(Path(tmp)))
    out = rows(run, bare, floor)
    print_rows(
        f"instances: {INSTANCES:,} distinct instances through one daemon, one event each, "
        f"maxLiveInstances {LIVE}; {COLD} hibernated instances with {HISTORY_TURNS} turns of "
        f"history woken one at a time (daemon warnings/errors: {run.problems or 'none'})",
        out,
    )
    assert run.disk is not None
    print(f"files a driven instance leaves: {', '.join(run.disk.sample)}")
    # the shape of the RSS curve says more than its slope (a plateau, steps, a steady climb)
    series = ", ".join(
        f"{n:,}: {daemon:.1f}" for n, daemon, _ in run.rss[:: max(1, len(run.rss) // 20)]
    )
    print(
        f"daemon RSS (MiB) by instances driven: {series}, {run.rss[-1][0]:,}: {run.rss[-1][1]:.1f}"
    )
    return out


if __name__ == "__main__":
    main()
