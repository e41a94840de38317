"""Real daemon, real agent processes (scripted model, tools acting on their own process)."""

from __future__ import annotations

import asyncio
import os

import pytest

from protocol.errors import ErrorCode
from tests.integration.conftest import StartDaemon
from tests.integration.harness import run_cli

COLD = {"GOONDAN_SPAWN_MODE": "cold"}
MODES = [pytest.param({}, id="forkserver"), pytest.param(COLD, id="cold")]


def output(reply_result: object) -> object:
    """The tool output a probe reply carries (the scripted model echoes the tool result)."""
    import json

    assert isinstance(reply_result, dict)
    return json.loads(reply_result["input"])["output"]


async def test_two_agents_run_in_two_processes(start_daemon: StartDaemon) -> None:
    async with asyncio.timeout(30):
        daemon = await start_daemon()
        alpha = await daemon.send("pid", "alpha")
        beta = await daemon.send("pid", "beta")
        assert alpha.ok and beta.ok, (alpha.error, beta.error)
        pids = {output(alpha.result), output(beta.result)}
        assert len(pids) == 2
        assert daemon.pid not in pids and os.getpid() not in pids
        table = {p.name: p for p in (await daemon.status()).processes}
        assert {table["alpha"].pid, table["beta"].pid} == pids
        assert table["alpha"].status == "idle" and table["alpha"].generation == 1


@pytest.mark.parametrize("env", MODES)
async def test_a_poison_event_answers_the_caller_and_restarts_only_that_process(
    start_daemon: StartDaemon, env: dict[str, str]
) -> None:
    """`crash` kills its process, and (idempotent) again when its cut turn resumes in the
    replacement: the second death answers E_AGENT_CRASHED, the third process serves on."""
    async with asyncio.timeout(30):  # the request itself would wait 60 s: we never get there
        daemon = await start_daemon(env=env)
        beta_before = output((await daemon.send("pid", "beta")).result)
        first = output((await daemon.send("pid", "alpha")).result)
        crashed = await daemon.send("crash", "alpha")
        assert not crashed.ok
        assert crashed.error is not None and crashed.error.code == ErrorCode.E_AGENT_CRASHED
        assert "agent:alpha:probe:2" in crashed.error.message
        assert daemon.find("event_retried", process="agent:alpha:probe:1")
        assert not daemon.find("event_retried", process="agent:alpha:probe:2")
        second = output((await daemon.send("pid", "alpha")).result)
        assert second != first
        alpha = await daemon.process("alpha")
        assert (alpha.generation, alpha.restarts, alpha.pid) == (3, 2, second)
        assert alpha.last_exit is not None and alpha.last_exit.reason == "crashed"
        beta = await daemon.process("beta")
        assert (beta.generation, beta.restarts, beta.pid) == (1, 0, beta_before)
        assert output((await daemon.send("pid", "beta")).result) == beta_before


async def test_events_behind_a_crash_are_served_by_the_replacement(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(30):
        daemon = await start_daemon()
        await daemon.send("pid", "alpha")
        texts = ["crash"] + [f"echo {i}" for i in range(5)]
        crash, *replies = await daemon.send_in_order(texts, "alpha")
        assert crash.error is not None and crash.error.code == ErrorCode.E_AGENT_CRASHED
        assert [r.result["input"] for r in replies] == [f"echo {i}" for i in range(5)]
        assert {r.result["source"]["instanceKey"] for r in replies} == {"probe"}
        assert (await daemon.process("alpha")).generation == 3  # crash ran twice (poison)


async def test_events_sent_while_spawning_are_queued_in_order_not_lost(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(30):
        daemon = await start_daemon()
        sends = [asyncio.ensure_future(daemon.send(f"echo {i}", "beta")) for i in range(10)]
        replies = await asyncio.gather(*sends)
        assert [r.result["input"] for r in replies] == [f"echo {i}" for i in range(10)]
        assert (await daemon.process("beta")).generation == 1


async def test_crash_loop_backs_off_with_the_configured_delays(start_daemon: StartDaemon) -> None:
    async with asyncio.timeout(30):
        daemon = await start_daemon()
        await daemon.send("hi", "crashy", wait=False)
        await daemon.wait_for("crashed", process="agent:crashy:probe:6")
        decisions = [line["decision"] for line in daemon.find("crashed")][:6]
        assert decisions == [
            "RespawnNow()",
            "RespawnNow()",
            "RespawnAfter(delay=0.1)",
            "RespawnAfter(delay=0.2)",
            "RespawnAfter(delay=0.4)",
            "RespawnAfter(delay=0.4)",
        ]
        assert daemon.find("transition", process="agent:crashy:probe:3", target="crashLoopBackOff")
        reply = await daemon.send("hi", "crashy")
        assert reply.error is not None
        assert reply.error.code in {ErrorCode.E_AGENT_BACKOFF, ErrorCode.E_AGENT_CRASHED}


async def test_a_start_error_is_answered_and_not_respawned_in_a_loop(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(30):
        daemon = await start_daemon()
        reply = await daemon.send("hi", "broken")
        assert reply.error is not None and reply.error.code == ErrorCode.E_AGENT_START_FAILED
        assert "broken on purpose" in reply.error.message
        broken = await daemon.process("broken")
        # not "terminated": it is held down and starts again later, and status says when
        assert broken.status == "startFailed"
        assert broken.generation <= 2  # held down: at most one retry after a second (load)
        # when: 0 once the hold-down is over and the retry is due (a slow status under load)
        assert broken.retry_in_seconds is not None and broken.retry_in_seconds >= 0
        assert broken.last_exit is not None and broken.last_exit.reason == "start_error"
        code, out, _ = await run_cli("status", "--swarm", daemon.swarm)
        assert code == 1  # a failing process fails the health check
        header = out.splitlines()[1].split()
        assert header[:5] == ["KIND", "NAME", "INSTANCE", "PID", "STATUS"]
        row = next(line for line in out.splitlines() if " broken " in line)
        assert row.split()[:3] == ["agent", "broken", "probe"] and "startFailed (retry in" in row
        [crash] = daemon.find("crashed", process="agent:broken:probe:1")
        assert crash["kind"] == "start_error" and crash["decision"].startswith("HoldDown")
        # the rest of the swarm is unaffected
        assert (await daemon.send("echo ok", "alpha")).result["input"] == "echo ok"


async def test_sigterm_drains_a_turn_in_progress_and_exits_0(start_daemon: StartDaemon) -> None:
    async with asyncio.timeout(30):
        daemon = await start_daemon()
        turn = asyncio.ensure_future(daemon.send("sleep 0.5", "alpha"))
        await daemon.wait_for("transition", process="agent:alpha:probe:1", target="processing")
        daemon.signal(15)
        reply = await turn
        assert reply.ok and reply.result["input"] == '{"status":"ok","output":"slept 0.5"}'
        assert await daemon.wait() == 0
        assert daemon.find("shutdown_ack", process="agent:alpha:probe:1")
        assert daemon.find("exit_status", process="agent:alpha:probe:1", exit="exit code 0")
        assert not daemon.descendants()


async def test_a_child_ignoring_shutdown_is_killed_after_the_grace_period(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(30):
        daemon = await start_daemon()
        hang = asyncio.ensure_future(daemon.send("hang", "alpha"))
        await daemon.wait_for("transition", process="agent:alpha:probe:1", target="processing")
        daemon.signal(15)
        assert await daemon.wait() == 0
        assert daemon.find("grace_period_over", process="agent:alpha:probe:1")
        assert daemon.find("exit_status", process="agent:alpha:probe:1", exit="killed by SIGKILL")
        reply = await hang  # not a crash: the stop ended it, and the journal keeps it
        assert reply.error is not None and reply.error.code == ErrorCode.E_AGENT_SHUTTING_DOWN


async def test_a_second_signal_forces_the_stop(start_daemon: StartDaemon) -> None:
    async with asyncio.timeout(30):
        daemon = await start_daemon()
        await daemon.send("hang", "alpha", wait=False)
        await daemon.wait_for("transition", process="agent:alpha:probe:1", target="processing")
        mark = daemon.mark()
        daemon.signal(15)
        await daemon.wait_for("transition", since=mark, target="draining")
        daemon.signal(2)
        assert await daemon.wait() == 1
        assert daemon.find("forced_stop", since=mark)
        assert not daemon.find("grace_period_over", since=mark)


@pytest.mark.parametrize("env", MODES)
async def test_sigkill_of_the_daemon_leaves_no_child_alive(
    start_daemon: StartDaemon, env: dict[str, str]
) -> None:
    import psutil

    async with asyncio.timeout(30):
        daemon = await start_daemon(env=env)
        await daemon.send("pid", "alpha")
        await daemon.send("pid", "beta")
        family = daemon.descendants()
        assert len(family) >= 2
        daemon.signal(9)
        await daemon.wait()
        _, alive = await asyncio.to_thread(psutil.wait_procs, family, 10)
        assert alive == []


async def test_an_idle_child_is_stopped_and_respawns_on_the_next_event(
    start_daemon: StartDaemon,
) -> None:
    from tests.integration.harness import FIXTURES

    async with asyncio.timeout(30):
        daemon = await start_daemon(FIXTURES / "idle", swarm="idle")
        first = await daemon.send("hello", "napper")
        assert first.ok and first.result["input"] == "hello"
        await daemon.wait_for("idle_stop", process="agent:napper:idle:1")
        await daemon.wait_for("transition", process="agent:napper:idle:1", target="terminated")
        napper = await daemon.process("napper")
        assert (napper.status, napper.pid, napper.last_exit.reason) == (
            "deactivated",
            None,
            "deactivated",
        )
        await daemon.wait_for("exit_status", process="agent:napper:idle:1", exit="exit code 0")
        again = await daemon.send("again", "napper")
        assert again.ok and again.result["input"] == "again"
        assert (await daemon.process("napper")).generation == 2
