"""Chaos, durable ingress: the orchestrator SIGKILLed every few seconds under mixed load and
started again on the same state root; every event it acknowledged is processed exactly once.

The clients (tests/chaos/durable.py) send on every ingress path: `goondan send --no-wait`,
waiting sends that re-attach by event id when their daemon dies, the webhook with and without
an Idempotency-Key (retried with it, and deliberately repeated), and agents__send /
agents__request between agents. The killer (tests/chaos/lives.py) SIGKILLs the orchestrator
after a random part of 2 * CHAOS_ORCH_KILL_MS (default 2500) of each life, waits until every
process of the run is gone, and runs `goondan run` again. Only the orchestrator is killed
(its agents die with it): an agent killed on its own ends its running event with
E_AGENT_CRASHED by design, which tests/chaos/test_chaos.py covers.

At the end (tests/chaos/ledger.py): every acknowledged input is in its instance's
conversation exactly once, under its acknowledged event id, its turn ended with one answer
(the one its client was given); no input or answer anywhere twice; unacknowledged inputs at
most once, refused ones never; no hang; no process left; nothing open in the journal.
Short by default (CHAOS_SECONDS=12); `make chaos` runs it for CHAOS_SECONDS. Run with -s for
the figures.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections import Counter
from typing import Any

from orchestrator.ingress.journal.sqlite import describe
from protocol.endpoints import StateLayout
from tests.chaos import checks
from tests.chaos.durable import Clients
from tests.chaos.ledger import Ledger, conversations, inter_agent_acks, verify
from tests.chaos.lives import SWARM, Lives
from tests.chaos.load import Control
from tests.integration.conftest import StartDaemon
from tests.integration.harness import free_port

SECONDS = float(os.environ.get("CHAOS_SECONDS", "12"))
PERIOD = int(os.environ.get("CHAOS_ORCH_KILL_MS", "2500")) / 1000
KEYS = ["k0", "k1", "k2"]  # 3 callers + 3 workers + the webhook connector per life
DRAIN_S = 150.0
"""After the load: every client finishes its input (each call is bounded, and so are retries)."""
SETTLE_S = 60.0
RESUMED = ("turn_resumed", "turn_already_done", "tool_call_rerun")


async def test_orchestrator_sigkill_loses_and_repeats_no_acknowledged_event(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(SECONDS + DRAIN_S + SETTLE_S + 60):
        lives = Lives(start_daemon, free_port())
        await lives.begin()
        await lives.listening()
        control = Control(SWARM)
        clients = Clients(lives, control, f"http://127.0.0.1:{lives.port}", KEYS)
        try:
            await load(lives, clients)
            left = await settle(clients.ledger)
        finally:
            control.close()
            await lives.close()
        orphans = await stop(lives)
        report, faults = await asyncio.to_thread(judge, lives, clients.ledger, left, orphans)
        print(f"\ndurable chaos: {json.dumps(report)}")
        for kind, items in faults.items():
            for item in items[:5]:
                print(f"  {kind}: {item}")
        assert lives.kills > 0 and not lives.failures, lives.failures
        for name, tally in clients.ledger.paths.items():
            assert tally.acked, f"{name}: nothing acknowledged"
            assert not tally.faults, (name, tally.faults[:10])
        assert not any(faults.values()), {k: v[:10] for k, v in faults.items() if v}
        assert not orphans and not lives.orphans, (orphans, lives.orphans)
        assert report["journal"]["open"] == 0, report["journal"]


async def load(lives: Lives, clients: Clients) -> None:
    stop = asyncio.Event()
    senders = [
        clients.nowait(stop),
        clients.waiting(stop, "wait", "worker", "wt"),
        clients.waiting(stop, "agents_send", "caller", "fwd"),
        clients.waiting(stop, "agents_request", "caller", "req"),
        clients.webhook(stop),
        clients.webhook(stop),
    ]
    tasks = [asyncio.ensure_future(s) for s in senders]
    killer = asyncio.ensure_future(lives.killer(stop, PERIOD))
    try:
        await asyncio.wait([*tasks, killer], timeout=SECONDS, return_when=asyncio.FIRST_EXCEPTION)
        stop.set()
        await asyncio.wait_for(killer, 60)  # the last restart it started comes up
        await asyncio.wait_for(asyncio.gather(*tasks), DRAIN_S)
    finally:
        for task in [*tasks, killer]:
            task.cancel()
        await asyncio.gather(*tasks, killer, return_exceptions=True)


async def settle(ledger: Ledger) -> dict[str, Any]:
    """Until nothing is open in the journal and every acknowledged input is in its
    conversation (bounded); what the journal says at the end."""
    path = StateLayout.from_env().journal_file(SWARM)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SETTLE_S
    while True:
        journal = await asyncio.to_thread(describe, path, time.time())
        assert journal is not None
        if journal["open"] == 0 or loop.time() > deadline:
            return journal
        await asyncio.sleep(0.5)  # the journal is another process's file: poll it


async def stop(lives: Lives) -> list[str]:
    """SIGTERM the last life; nothing of any life may be left."""
    daemon = lives.current.daemon
    procs = daemon.descendants()
    daemon.signal(signal.SIGTERM)
    assert await daemon.wait() == 0
    return await checks.wait_gone(procs, StateLayout.from_env().root, 10)


def judge(
    lives: Lives, ledger: Ledger, journal: dict[str, Any], orphans: list[str]
) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """The figures of the run, and the ledger's faults against the conversations."""
    for (agent, _key), messages in conversations(SWARM).items():
        if agent == "caller":  # what the callers handed on, seen or not by their clients
            for given in inter_agent_acks(messages):
                ledger.ack(given)
    faults = verify(ledger, SWARM)
    redelivered = lives.lines("event_redelivered")
    report = {
        "seconds": SECONDS, "lives": len(lives.all), "kills": lives.kills,
        "paths": {name: t.figures() for name, t in sorted(ledger.paths.items())},
        "acked": len(ledger.acked), "unknown": len(ledger.unknown),
        "redelivered": len(redelivered),
        "redelivered_claimed": sum(1 for line in redelivered if line.get("claimed")),
        "duplicates_answered": len(lives.lines("send_duplicate")),
        "agents": agent_log_counts(), "journal": journal,
        "orphans": len(orphans) + len(lives.orphans),
        "faults": {kind: len(items) for kind, items in faults.items()},
    }  # fmt: skip
    return report, faults


def agent_log_counts() -> dict[str, int]:
    """Resumptions the agents logged: a cut turn resumed, an ended one answered again, a cut
    idempotent tool call run again."""
    counts: Counter[str] = Counter()
    logs = StateLayout.from_env().logs_dir(SWARM)
    for path in logs.glob("*.log"):
        for raw in path.read_bytes().splitlines():
            try:
                event = json.loads(raw).get("event")
            except ValueError:
                continue
            if event in RESUMED:
                counts[event] += 1
    return {name: counts[name] for name in RESUMED}
