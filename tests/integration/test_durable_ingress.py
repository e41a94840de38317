"""An event the daemon accepted is never lost: journaled before it is acknowledged, delivered
again after the orchestrator is SIGKILLed, and its turn run exactly once (a cut turn resumed)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

from protocol.control import Attach
from protocol.endpoints import StateLayout
from tests.integration.conftest import StartDaemon
from tests.integration.harness import run_cli

SWARM = "probe"


def conversation(agent: str = "alpha", key: str = SWARM) -> list[dict[str, object]]:
    paths = StateLayout.from_env().instance_paths(SWARM, key, agent)
    messages: dict[str, dict[str, object]] = {}
    for name in ("base_jsonl", "events_jsonl"):
        path = getattr(paths, name)
        for line in path.read_text().splitlines() if path.exists() else []:
            record = json.loads(line)
            message = record.get("message", record)
            messages[message["id"]] = message  # events replay over the base
    return list(messages.values())


async def test_six_accepted_sends_survive_an_orchestrator_sigkill(
    start_daemon: StartDaemon,
) -> None:
    """The issue's scenario: six `send --no-wait`, the orchestrator SIGKILLed while the first
    turns run, `goondan run` again: six replies, each exactly once. The cut turn resumes; its
    cut tool call (`probe__sleep`, declared idempotent) runs again."""
    async with asyncio.timeout(120):
        daemon = await start_daemon()
        ids = []
        for i in range(6):
            accepted = await daemon.send(f"sleep 0.{i + 3}", "alpha", wait=False)
            assert accepted.ok, accepted.error
            ids.append(accepted.result)
        await daemon.wait_for("transition", target="processing")
        alpha = await daemon.process("alpha")
        assert alpha.pending >= 1  # the journal's open events, shown per instance
        daemon.signal(signal.SIGKILL)
        await daemon.wait()
        again = await start_daemon()
        replies = []
        for event_id in ids[:-1]:
            reply = await again.request(
                Attach(request_id=event_id, event_id=event_id, timeout_ms=60_000), limit=60
            )
            assert reply.ok, reply.error
            replies.append(reply.result)
        code, out, err = await run_cli("send", "--attach", ids[-1], "--swarm", SWARM)
        assert code == 0, err
        assert json.loads(out)["output"] == "slept 0.8"
        slept = [json.loads(r["input"])["output"] for r in replies]
        assert slept == [f"slept 0.{i + 3}" for i in range(5)]
        assert again.find("event_redelivered")
    messages = conversation()
    inputs = [m for m in messages if m["role"] == "user"]
    assert [m["metadata"]["eventId"] for m in inputs] == ids  # each once, in order
    assert all(m["metadata"]["turnOutcome"] == "completed" for m in inputs)
    finals = [m for m in messages if m["role"] == "assistant" and not m.get("toolCalls")]
    done = [json.loads(str(m["content"]))["output"] for m in finals]
    assert done == [f"slept 0.{i + 3}" for i in range(6)]


async def test_an_agent_sigkilled_mid_turn_finishes_the_turn_in_its_replacement(
    start_daemon: StartDaemon, tmp_path: Path
) -> None:
    """The daemon lives, the agent process is SIGKILLed from outside (the OOM killer, an
    operator) while a waiting send and two `--no-wait` sends are in flight: the cut turn goes
    once more to the replacement, which resumes it (its idempotent `until` runs again), and
    every event ends in its reply, once in the conversation, in order."""
    async with asyncio.timeout(60):
        daemon = await start_daemon()
        # the turn runs until the gate file exists: it is surely cut, however slow the sends
        gate = tmp_path / "gate"
        waiting = asyncio.ensure_future(daemon.send(f"until {gate}", "alpha"))
        await daemon.wait_for("transition", process="agent:alpha:probe:1", target="processing")
        later = [await daemon.send(f"sleep 0.{i}", "alpha", wait=False) for i in (1, 2)]
        alpha = await daemon.process("alpha")
        os.kill(alpha.pid, signal.SIGKILL)
        gate.touch()
        reply = await waiting
        assert reply.ok, reply.error
        assert json.loads(reply.result["input"])["output"] == "reached"
        [retried] = daemon.find("event_retried", process="agent:alpha:probe:1")
        for accepted in later:
            done = await daemon.request(
                Attach(request_id=accepted.result, event_id=accepted.result, timeout_ms=30_000),
                limit=30,
            )
            assert done.ok, done.error
        assert (await daemon.process("alpha")).generation == 2
    inputs = [m for m in conversation() if m["role"] == "user"]
    assert [m["metadata"]["eventId"] for m in inputs][-3:] == [
        retried["event_id"],
        *(a.result for a in later),
    ]
    assert all(m["metadata"]["turnOutcome"] == "completed" for m in inputs)


async def test_send_to_a_busy_instance_says_which_turn_it_waits_behind(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(60):
        daemon = await start_daemon()
        first = await daemon.send("sleep 1.5", "alpha", wait=False)
        assert first.ok, first.error
        await daemon.wait_for("transition", target="processing")
        reply = await daemon.send("sleep 0.1", "alpha")
        assert reply.ok, reply.error
        [notice] = daemon.notices
        assert notice.startswith("waiting behind") and "alpha@" in notice
