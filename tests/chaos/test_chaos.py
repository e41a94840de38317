"""Chaos: a real daemon, inter-agent requests and external events, and a monkey with SIGKILL.

Short by default (CHAOS_SECONDS=20, a kill every CHAOS_KILL_MS=700 ms); `make chaos` runs
longer. Counts are printed (run with -s to see them) and asserted:
0 hangs, 0 accepted events lost, 0 orphans or zombies, conversations that replay cleanly.
"""

from __future__ import annotations

import asyncio
import os
import signal

from protocol.control import StatusQuery
from protocol.endpoints import StateLayout
from tests.chaos import checks
from tests.chaos.load import Books, Control, run_load
from tests.integration.conftest import StartDaemon
from tests.integration.harness import REPO, Daemon

BUNDLE = REPO / "tests" / "chaos" / "bundle"
SWARM = "chaos"
SECONDS = float(os.environ.get("CHAOS_SECONDS", "20"))
PERIOD = int(os.environ.get("CHAOS_KILL_MS", "700")) / 1000
KEYS = ["k0", "k1", "k2"]  # 3 callers + 3 workers = 6 agent processes


async def settle(daemon: Daemon, books: Books, limit: float = 30) -> dict[str, str]:
    """After the load: wait (bounded) until every accepted event shows up somewhere."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while True:
        missing = await asyncio.to_thread(checks.unprocessed, daemon, SWARM, books)
        if not missing or loop.time() > deadline:
            return missing
        await asyncio.sleep(0.5)  # the workers' conversations are files: poll them


async def stop(daemon: Daemon) -> list[str]:
    """SIGTERM, then nothing of this run may be left (orphans, zombies)."""
    procs = daemon.descendants()
    daemon.signal(signal.SIGTERM)
    assert await daemon.wait() == 0
    root = StateLayout.from_env().root
    return await asyncio.to_thread(checks.survivors, procs, root)


async def test_chaos_no_hangs_no_lost_events_no_orphans(start_daemon: StartDaemon) -> None:
    async with asyncio.timeout(SECONDS + 120):
        daemon = await start_daemon(BUNDLE, swarm=SWARM)
        control = Control(SWARM)
        try:
            books = await run_load(control, KEYS, SECONDS, PERIOD)
            missing = await settle(daemon, books)
            ping = await control.call(StatusQuery(request_id="end"), 10)
            assert ping.ok, "the daemon does not answer after the chaos"
        finally:
            control.close()
        orphans = await stop(daemon)
        faults = await asyncio.to_thread(checks.conversation_faults, SWARM)
        report = books.summary() | {"unprocessed": len(missing), "orphans": orphans}
        print(f"\nchaos: {report}")
        assert books.kills > 0 and books.requests > 0 and books.accepted
        assert not books.hangs, books.hangs[:10]
        assert not missing, list(missing.values())[:10]
        assert not orphans, orphans
        assert not faults, faults


async def test_orchestrator_sigkill_under_load_then_restart_resumes(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(120):
        daemon = await start_daemon(BUNDLE, swarm=SWARM)
        first = await daemon.send("req before", "caller", key="k0")
        assert first.ok, first.error
        before = await checks_history(daemon)
        assert before > 0
        control = Control(SWARM)
        load = asyncio.ensure_future(run_load(control, ["k0"], 3600, 3600, clients=2))
        await daemon.wait_for("transition", daemon.mark(), target="processing")
        procs = daemon.descendants()
        daemon.signal(signal.SIGKILL)
        await daemon.wait()
        load.cancel()
        await asyncio.gather(load, return_exceptions=True)
        control.close()
        # children die with the daemon (PDEATHSIG): nothing of the first run is left
        root = StateLayout.from_env().root
        left = await wait_gone(procs, root)
        assert not left, left
        again = await start_daemon(BUNDLE, swarm=SWARM)
        after = await checks_history(again)
        print(f"\nrestart: history before kill {before}, after restart {after}")
        assert after > before  # the new process replayed the old conversation
        reply = await again.send("req after restart", "caller", key="k0")
        assert reply.ok, reply.error
        assert not await asyncio.to_thread(checks.conversation_faults, SWARM)


async def checks_history(daemon: Daemon) -> int:
    reply = await daemon.send("history", "caller", key="k0")
    assert reply.ok and isinstance(reply.result, dict), reply.error
    text = str(reply.result["input"])
    assert text.startswith("history "), text
    return int(text.split()[1])


async def wait_gone(procs: list[object], root: object, limit: float = 10) -> list[str]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while True:
        left = await asyncio.to_thread(checks.survivors, procs, root)  # type: ignore[arg-type]
        if not left or loop.time() > deadline:
            return left
        await asyncio.sleep(0.2)  # exits of processes we do not parent: poll
