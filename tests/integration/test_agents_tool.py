"""The `agents` tool through a real daemon: caller and worker are real processes, every call
travels agent -> orchestrator -> agent (fixture: tests/fixtures/agents, scripted models)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path
from typing import Any

from protocol.endpoints import InstancePaths, StateLayout
from protocol.errors import ErrorCode
from tests.integration.conftest import StartDaemon
from tests.integration.harness import REPO, Daemon, run_cli

BUNDLE = REPO / "tests" / "fixtures" / "agents"
SWARM = "agents"
CALLER = "agent:caller:agents:1"


def paths(agent: str, key: str = SWARM) -> InstancePaths:
    return StateLayout.from_env().instance_paths(SWARM, key, agent)


def runtime_events(agent: str, key: str = SWARM) -> list[dict[str, Any]]:
    text = paths(agent, key).runtime_events_jsonl.read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


async def ask(daemon: Daemon, text: str) -> dict[str, Any]:
    """The caller's reply: the scripted model answers with the last tool result (JSON)."""
    reply = await daemon.send(text, "caller")
    assert reply.ok, reply.error
    assert isinstance(reply.result, dict)
    result: dict[str, Any] = json.loads(reply.result["input"])
    return result


async def start(start_daemon: StartDaemon) -> Daemon:
    return await start_daemon(BUNDLE, swarm=SWARM)


async def test_sync_request_returns_the_reply_and_shares_the_trace(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(30):
        daemon = await start(start_daemon)
        result = await ask(daemon, "sync hello")
        assert result["status"] == "ok"
        out = result["output"]
        assert out["response"] == "worker: sync hello"
        assert (out["target"], out["instanceKey"], out["accepted"], out["async"]) == (
            "worker",
            SWARM,
            True,
            False,
        )
        assert out["eventId"] and out["correlationId"]
        caller = runtime_events("caller")
        worker = runtime_events("worker")
        tool = next(e for e in caller if e["type"] == "tool.called")
        assert tool["toolName"] == "agents__request"
        turn = next(e for e in worker if e["type"] == "turn.started")
        assert turn["traceId"] == tool["traceId"]
        assert turn["parentSpanId"] == tool["spanId"]
        assert {e["traceId"] for e in caller + worker} == {tool["traceId"]}


async def test_async_reply_after_the_turn_ended_runs_exactly_one_caller_turn(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(30):
        daemon = await start(start_daemon)
        mark = daemon.mark()
        result = await ask(daemon, "async job")
        out = result["output"]
        assert (out["accepted"], out["async"], out["response"]) == (True, True, None)
        # idle after the first turn, then processing -> idle for the reply's turn
        turn_end = {"process": CALLER, "source": "processing", "target": "idle"}
        first = await daemon.wait_for("transition", mark, **turn_end)
        second = await daemon.wait_for("transition", daemon.lines.index(first) + 1, **turn_end)
        assert second is not first
        messages = map(json.loads, paths("caller").base_jsonl.read_text().splitlines())
        injected = [m for m in messages if "interAgentResponse" in m.get("metadata", {})]
        assert len(injected) == 1
        assert "late reply to async job" in injected[0]["content"]
        assert injected[0]["metadata"]["correlationId"] == out["correlationId"]
        assert not any(p.name.startswith("reply-") for p in paths("caller").inbox_dir.iterdir())
        # a later input runs one turn: no spurious turn was queued for the reply
        await ask_text(daemon, "plain")
        started = [e for e in runtime_events("caller") if e["type"] == "turn.started"]
        assert len(started) == 3


async def ask_text(daemon: Daemon, text: str) -> str:
    reply = await daemon.send(text, "caller")
    assert reply.ok, reply.error
    assert isinstance(reply.result, dict)
    return str(reply.result["input"])


async def test_send_is_fire_and_forget_and_reaches_the_worker(start_daemon: StartDaemon) -> None:
    async with asyncio.timeout(30):
        daemon = await start(start_daemon)
        mark = daemon.mark()
        out = (await ask(daemon, "send note"))["output"]
        assert out["accepted"] is True and out["eventId"]
        worker = {"process": "agent:worker:agents:1", "source": "processing", "target": "idle"}
        await daemon.wait_for("transition", mark, **worker)
        inputs = [
            json.loads(line).get("content")
            for line in paths("worker").base_jsonl.read_text().splitlines()
        ]
        assert "send note" in inputs


async def test_spawn_with_cwd_then_request_and_list_and_catalog(
    start_daemon: StartDaemon, tmp_path: Path
) -> None:
    async with asyncio.timeout(30):
        daemon = await start(start_daemon)
        cwd = paths("caller").workdir / "work here"  # relative to the caller's own workdir
        out = (await ask(daemon, "work here"))["output"]
        assert json.loads(out["response"])["output"]["workdir"] == str(cwd)
        assert cwd.is_dir()
        listed = (await ask(daemon, "list"))["output"]
        assert listed["count"] == 1
        (item,) = listed["agents"]
        worker = await daemon_process(daemon, "worker", "w1")
        assert item["target"] == "worker" and item["instanceKey"] == "w1"
        assert (item["ownerAgent"], item["ownerInstanceKey"]) == ("caller", SWARM)
        assert item["cwd"] == str(cwd) and item["createdAt"] > 0
        assert item["pid"] == worker.pid and item["status"] == "idle"
        everything = (await ask(daemon, "listall"))["output"]
        assert {(a["target"], a["instanceKey"]) for a in everything["agents"]} == {
            ("caller", SWARM),
            ("worker", "w1"),
        }
        catalog = (await ask(daemon, "catalog"))["output"]
        assert catalog["swarmName"] == SWARM and catalog["entryAgent"] == "caller"
        assert catalog["selfAgent"] == "caller"
        assert catalog["availableAgents"] == ["caller", "worker"]
        assert catalog["callableAgents"] == ["worker"]


async def test_a_spawn_cannot_re_root_an_agent_outside_its_caller(
    start_daemon: StartDaemon,
) -> None:
    """An agent spawned with `cwd: "/"` read /etc/passwd and the state root's secrets."""
    async with asyncio.timeout(30):
        daemon = await start(start_daemon)
        for cwd in ("/", "../../../.."):
            out = (await ask(daemon, cwd))["output"]  # spawn refused; the request then runs
            workdir = json.loads(out["response"])["output"]["workdir"]
            assert workdir == str(paths("worker", "w1").workdir)  # its own, not the caller's pick
        tool_results = [
            json.loads(line) for line in paths("caller").base_jsonl.read_text().splitlines()
        ]
        refusals = [m for m in tool_results if "E_AGENT_SPAWN_DENIED" in m.get("content", "")]
        assert len(refusals) == 2
        assert not (paths("worker", "w1").root / "spawn.json").exists()


async def daemon_process(daemon: Daemon, name: str, key: str) -> Any:
    status = await daemon.status()
    return next(p for p in status.processes if p.name == name and p.instance_key == key)


async def test_a_cycle_is_refused_with_the_chain(start_daemon: StartDaemon) -> None:
    async with asyncio.timeout(30):
        daemon = await start(start_daemon)
        out = (await ask(daemon, "cycle"))["output"]
        # the worker's own tool call failed; its reply (the tool result) names the chain
        inner = json.loads(out["response"])
        assert inner["error"]["code"] == ErrorCode.E_AGENT_CYCLE
        assert "caller@agents → worker@agents → caller@agents" in inner["error"]["message"]


async def test_a_callee_that_dies_answers_crashed_at_once(start_daemon: StartDaemon) -> None:
    async with asyncio.timeout(30):
        daemon = await start(start_daemon)
        result = await ask(daemon, "crash")
        assert result["error"]["code"] == ErrorCode.E_AGENT_CRASHED
        failed = next(e for e in runtime_events("caller") if e["type"] == "tool.failed")
        # answered by the callee's death, not by the request's own 60 s timeout (it takes well
        # under a second on a quiet machine; the bound leaves room for CI's load, as no test
        # here asserts a timing)
        assert failed["durationMs"] < 10_000


async def test_timeout_and_bad_targets_are_coded(start_daemon: StartDaemon) -> None:
    async with asyncio.timeout(30):
        daemon = await start(start_daemon)
        timed_out = await ask(daemon, "timeout")
        assert timed_out["error"]["code"] == ErrorCode.E_AGENT_TIMEOUT
        unknown = await ask(daemon, "unknown")
        assert unknown["error"]["code"] == ErrorCode.E_AGENT_NOT_FOUND
        assert "caller, worker" in unknown["error"]["message"]
        outsider = await ask(daemon, "outsider")
        assert outsider["error"]["code"] == ErrorCode.E_AGENT_NOT_IN_SWARM
        itself = await ask(daemon, "self")
        assert itself["error"]["code"] == ErrorCode.E_AGENT_SELF_REQUEST


async def test_the_multi_agent_example_runs_offline_with_one_command() -> None:
    async with asyncio.timeout(60):
        example = REPO / "bundles" / "examples" / "multi-agent"
        code, out, err = await run_cli("run", str(example), "--input", "summarise the notes")
        assert code == 0, err
        assert "Task done by the worker: summarise the notes" in out


async def test_an_async_reply_survives_a_restart_of_the_caller(start_daemon: StartDaemon) -> None:
    async with asyncio.timeout(30):
        daemon = await start(start_daemon)
        out = (await ask(daemon, "async slow job"))["output"]
        assert out["async"] is True
        caller = await daemon_process(daemon, "caller", SWARM)
        mark = daemon.mark()
        os.kill(caller.pid, signal.SIGKILL)  # while the worker is still working on it
        second = "agent:caller:agents:2"
        await daemon.wait_for("transition", mark, process=second, source="processing")
        await daemon.wait_for(
            "transition", mark, process=second, target="idle", source="processing"
        )
        messages = map(json.loads, paths("caller").base_jsonl.read_text().splitlines())
        injected = [m for m in messages if "interAgentResponse" in m.get("metadata", {})]
        assert len(injected) == 1
        assert "slow reply to async slow job" in injected[0]["content"]
        assert not list(paths("caller").inbox_dir.iterdir())


async def test_a_request_back_after_a_send_is_no_cycle(start_daemon: StartDaemon) -> None:
    """Nobody waits on a send, so the worker may ask the sender: it is answered."""
    async with asyncio.timeout(30):
        daemon = await start(start_daemon)
        mark = daemon.mark()
        out = (await ask(daemon, "sendback"))["output"]
        assert out["accepted"] is True
        worker = {"process": "agent:worker:agents:1", "source": "processing", "target": "idle"}
        await daemon.wait_for("transition", mark, **worker)
        messages = map(json.loads, paths("worker").base_jsonl.read_text().splitlines())
        results = [json.loads(m["content"]) for m in messages if m["role"] == "tool"]
        assert results[-1]["status"] == "ok", results[-1]
        assert results[-1]["output"]["response"] == "caller: back"


async def test_turn_and_step_middleware_use_ctx_agents(start_daemon: StartDaemon) -> None:
    async with asyncio.timeout(30):
        daemon = await start(start_daemon)
        mark = daemon.mark()
        text = await ask_text(daemon, "mw hello")
        assert text == "turn mw got: worker: asked by turn middleware"
        worker = {"process": "agent:worker:agents:1", "source": "processing", "target": "idle"}
        first = await daemon.wait_for("transition", mark, **worker)
        await daemon.wait_for("transition", daemon.lines.index(first) + 1, **worker)
        inputs = [
            json.loads(line).get("content")
            for line in paths("worker").base_jsonl.read_text().splitlines()
        ]
        assert "asked by turn middleware" in inputs
        assert "note from step middleware" in inputs


async def test_an_async_reply_restarts_a_caller_stopped_for_idleness(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(30):
        daemon = await start_daemon(REPO / "tests" / "fixtures" / "agents_idle", swarm=SWARM)
        mark = daemon.mark()
        out = (await ask(daemon, "job"))["output"]
        assert out["async"] is True
        stopped = await daemon.wait_for("transition", mark, process=CALLER, target="terminated")
        second = "agent:caller:agents:2"
        after = daemon.lines.index(stopped)
        await daemon.wait_for("transition", after, process=second, source="processing")
        messages = map(json.loads, paths("caller").base_jsonl.read_text().splitlines())
        injected = [m for m in messages if "interAgentResponse" in m.get("metadata", {})]
        assert len(injected) == 1 and "late reply to job" in injected[0]["content"]
