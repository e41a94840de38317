"""Chaos: a real daemon, inter-agent requests and external events, and a monkey with SIGKILL.

Short by default (CHAOS_SECONDS=20, a kill every CHAOS_KILL_MS=700 ms); `make chaos` runs
longer. External events come in on three paths: the control socket, the `goondan send` CLI
and the webhook connector (tests/chaos/external.py). Counts are printed (run with -s to see
them) and asserted: 0 hangs, 0 accepted events lost on any path, 0 orphans or zombies,
conversations that replay cleanly.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Sequence

from protocol.control import StatusQuery
from protocol.endpoints import StateLayout
from tests.chaos import checks
from tests.chaos.deferred import deferrer, leftover_calls
from tests.chaos.external import cli_sender, hook_sender
from tests.chaos.load import Books, Control, Sender, run_load
from tests.integration.conftest import StartDaemon
from tests.integration.harness import REPO, Daemon, free_port

BUNDLE = REPO / "tests" / "chaos" / "bundle"
SWARM = "chaos"
HOOK = "connector:hook:webhook"
SECONDS = float(os.environ.get("CHAOS_SECONDS", "20"))
PERIOD = int(os.environ.get("CHAOS_KILL_MS", "700")) / 1000
KEYS = ["k0", "k1", "k2"]  # 3 callers + 3 workers = 6 agent processes
DEFERRED_KEYS = ["d0", "d1", "d2"]  # + 3 workers whose turns wait for a client


RPC_SECRET = "chaos-rpc-secret"
"""The signingSecret of the Connection `answers` (its POST /rpc takes only signed answers)."""


def chaos_env(hook_port: int, rpc_port: int = 0) -> dict[str, str]:
    return {"CHAOS_HOOK_PORT": str(hook_port), "CHAOS_RPC_PORT": str(rpc_port),
            "CHAOS_RPC_SECRET": RPC_SECRET}  # fmt: skip


async def start_chaos(start_daemon: StartDaemon) -> tuple[Daemon, str, str]:
    """The chaos daemon with its webhooks on free ports; (daemon, `hook` base URL, `answers`
    base URL)."""
    port, rpc_port = free_port(), free_port()
    daemon = await start_daemon(BUNDLE, swarm=SWARM, env=chaos_env(port, rpc_port))
    for hook in (HOOK, "connector:answers:webhook"):
        await daemon.wait_for("transition", process=f"{hook}:1", target="idle")
    return daemon, f"http://127.0.0.1:{port}", f"http://127.0.0.1:{rpc_port}"


def external_senders(control: Control, url: str) -> list[Sender]:
    async def cli(books: Books, stop: asyncio.Event) -> None:
        await cli_sender(SWARM, books.path("cli"), KEYS, stop)

    async def hook(books: Books, stop: asyncio.Event) -> None:
        await hook_sender(url, books.path("webhook"), KEYS, stop)

    async def ask(books: Books, stop: asyncio.Event) -> None:
        await deferrer(control, books.path("deferred"), DEFERRED_KEYS, stop)

    return [cli, hook, hook, ask]


async def settle(
    daemon: Daemon, books: Books, limit: float = 30
) -> tuple[dict[str, str], list[str]]:
    """After the load: wait (bounded) until every accepted event shows up somewhere and no
    deferred call is left on disk; (events missing, calls left)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while True:
        missing = await asyncio.to_thread(checks.unprocessed, daemon, SWARM, books)
        calls = await asyncio.to_thread(leftover_calls, SWARM)
        if (not missing and not calls) or loop.time() > deadline:
            return missing, calls
        await asyncio.sleep(0.5)  # the workers' conversations are files: poll them


async def stop(daemon: Daemon) -> list[str]:
    """SIGTERM, then nothing of this run may be left (orphans, zombies)."""
    procs = daemon.descendants()
    daemon.signal(signal.SIGTERM)
    assert await daemon.wait() == 0
    root = StateLayout.from_env().root
    return await asyncio.to_thread(checks.survivors, procs, root)


def trail(daemon: Daemon, missing: dict[str, str]) -> list[str]:
    """The daemon's log lines that name a missing event (its journal append, delivery,
    crash answers): what a failure needs to tell a lost event from a slow one."""
    ids = set(missing)
    return [
        json.dumps(line)[:400]
        for line in daemon.lines
        if ids & {str(v) for v in line.values() if isinstance(v, str)}
    ][:40]


def assert_paths(books: Books, missing: dict[str, str], traces: Sequence[str] = ()) -> None:
    """On every path: something was accepted, and all of it was processed or reported."""
    assert set(books.paths) == {"control", "cli", "webhook", "deferred"}, books.paths.keys()
    for name, tally in books.paths.items():
        assert tally.accepted, f"{name}: nothing accepted"
        assert not tally.hangs, (name, tally.hangs[:10])
        assert not tally.faults, (name, tally.faults[:10])
    assert not missing, (list(missing.values())[:10], traces)


async def test_chaos_no_hangs_no_lost_events_no_orphans(start_daemon: StartDaemon) -> None:
    async with asyncio.timeout(SECONDS + 150):
        daemon, url, _ = await start_chaos(start_daemon)
        control = Control(SWARM)
        try:
            books = await run_load(control, KEYS, SECONDS, PERIOD,
                                   senders=external_senders(control, url))  # fmt: skip
            missing, calls = await settle(daemon, books)
            ping = await control.call(StatusQuery(request_id="end"), 10)
            assert ping.ok, "the daemon does not answer after the chaos"
        finally:
            control.close()
        orphans = await stop(daemon)
        faults = await asyncio.to_thread(checks.conversation_faults, SWARM)
        report = books.summary(missing) | {
            "unprocessed": len(missing), "calls_left": calls, "orphans": orphans,
        }  # fmt: skip
        print(f"\nchaos: {report}")
        assert books.kills > 0 and books.requests > 0
        assert not books.hangs, books.hangs[:10]
        assert_paths(books, missing, traces=trail(daemon, missing))
        assert not calls, calls
        assert not orphans, orphans
        assert not faults, faults
