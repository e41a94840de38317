"""Instances are virtual actors (ARCHITECTURE.md §5): activated by their first event,
deactivated when idle or to make room at the live bound, and nothing is lost in between.

Each test writes its bundle into its own directory; a real daemon, real agent processes (forked
by the fork server) and real sockets serve it. The conversation test drives an OpenAI model
served by a local fake (`tests.unit.agent_process.fake_llm`), so what the reactivated process
sends the model is what it loaded from the files.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import msgspec

from protocol.control import CallsList, CallsResolve, ProcessInfo
from protocol.endpoints import StateLayout
from tests.integration.conftest import StartDaemon
from tests.integration.harness import Daemon, run_cli
from tests.unit.agent_process.fake_llm import FakeLLMServer, chat_completion

HEAD = "apiVersion: goondan.ai/v1\n"
ECHO = HEAD + "kind: Model\nmetadata: {name: echo}\nspec: {provider: scripted, model: echo}\n"


def _bundle(directory: Path, *docs: str) -> Path:
    path = directory / "goondan.yaml"
    path.write_text("---\n".join(docs))
    return path


def _agent(name: str, model: str, tools: str = "[]") -> str:
    return (
        HEAD + f"kind: Agent\nmetadata: {{name: {name}}}\n"
        f"spec: {{modelConfig: {{modelRef: Model/{model}}}, tools: {tools}}}\n"
    )


def _swarm(agents: list[str], policy: str) -> str:
    members = ", ".join(f"Agent/{a}" for a in agents)
    return (
        HEAD + "kind: Swarm\nmetadata: {name: actors}\n"
        f"spec:\n  entryAgent: Agent/{agents[0]}\n  agents: [{members}]\n  policy: {policy}\n"
    )


async def _row(daemon: Daemon, agent: str, key: str) -> ProcessInfo:
    status = await daemon.status()
    return next(p for p in status.processes if (p.name, p.instance_key) == (agent, key))


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _contents(path: Path) -> list[str]:
    return [json.loads(line)["content"] for line in path.read_text().splitlines()]


async def test_an_idle_instance_is_deactivated_and_its_next_event_finds_its_conversation(
    start_daemon: StartDaemon, tmp_path: Path
) -> None:
    async with FakeLLMServer() as llm, asyncio.timeout(60):
        llm.replies = [(200, chat_completion("one")), (200, chat_completion("two"))]
        model = (
            HEAD + "kind: Model\nmetadata: {name: llm}\nspec:\n  provider: openai\n"
            f"  model: gpt-test\n  endpoint: http://127.0.0.1:{llm.port}/v1\n"
            "  apiKey: {value: sk-test}\n  options: {maxRetries: 0, timeoutSeconds: 10}\n"
        )
        policy = "{lifecycle: {idleTimeoutSeconds: 0.3, reconcileIntervalSeconds: 0.1}}"
        bundle = _bundle(tmp_path, model, _agent("chat", "llm"), _swarm(["chat"], policy))
        daemon = await start_daemon(bundle, swarm="actors")
        first = await daemon.send("first", key="u1")
        assert first.ok and first.result["input"] == "one"
        await daemon.wait_for("transition", process="agent:chat:u1:1", target="terminated")
        row = await _row(daemon, "chat", "u1")
        assert (row.status, row.pid) == ("deactivated", None)
        assert row.last_exit is not None and row.last_exit.reason == "deactivated"
        # its state is its files, and only those with something in them
        layout = StateLayout.from_env()
        paths = layout.instance_paths("actors", "u1", "chat")
        assert _files(paths.root) == [
            "messages", "messages/base.jsonl", "messages/runtime-events.jsonl",
        ]  # fmt: skip
        assert not layout.process_log("actors", "chat", "u1").exists()  # it logged nothing
        code, out, _ = await run_cli("status")
        assert code == 0 and "deactivated" in out  # not a failure

        second = await daemon.send("second", key="u1")  # activates it again
        assert second.ok and second.result["input"] == "two"
        again = await _row(daemon, "chat", "u1")
        assert (again.generation, again.restarts) == (2, 0)  # reactivated, not restarted
        sent = [(m["role"], m["content"]) for m in llm.requests[-1].body["messages"]]
        assert sent[-3:] == [("user", "first"), ("assistant", "one"), ("user", "second")]
        assert _contents(paths.base_jsonl) == ["first", "one", "second", "two"]


async def test_at_the_live_bound_the_least_recently_used_instance_makes_room(
    start_daemon: StartDaemon, tmp_path: Path
) -> None:
    policy = "{maxLiveInstances: 2, lifecycle: {idleTimeoutSeconds: null}}"
    bundle = _bundle(tmp_path, ECHO, _agent("echo", "echo"), _swarm(["echo"], policy))
    async with asyncio.timeout(60):
        daemon = await start_daemon(bundle, swarm="actors")
        for key in ("k1", "k2", "k3"):  # k3 needs a slot: k1 was used least recently
            assert (await daemon.send(f"hi {key}", key=key)).ok
        evicted = await daemon.wait_for("instance_evicted")
        assert (evicted["process"], evicted["for_"]) == ("agent:echo:k1:1", "agent:echo:k3")
        await daemon.wait_for("transition", process="agent:echo:k1:1", target="terminated")
        assert (await _row(daemon, "echo", "k1")).status == "deactivated"
        mark = daemon.mark()
        assert (await daemon.send("back", key="k1")).ok  # now k2 is the least recently used
        assert (await daemon.wait_for("instance_evicted", mark))["process"] == "agent:echo:k2:1"
        live = [p for p in (await daemon.status()).processes if p.pid is not None]
        assert sorted(p.instance_key for p in live) == ["k1", "k3"]
        base = StateLayout.from_env().instance_paths("actors", "k1", "echo").base_jsonl
        assert _contents(base) == ["hi k1", "hi k1", "back", "back"]


CALLER_SCRIPT = """\
kind: Model
metadata: {name: caller-script}
spec:
  provider: scripted
  model: caller
  options:
    script:
      - afterTool: "*"
        reply: "{last_tool_result}"
      - match: "^\\\\[agent response"
        reply: "got: {input}"
      - match: "^job"
        toolCalls: [{name: agents__request, args: {target: worker, input: "{input}", async: true}}]
"""
WORKER_SCRIPT = """\
kind: Model
metadata: {name: worker-script}
spec:
  provider: scripted
  model: worker
  options: {script: [{match: "^job", delayMs: 1500, reply: "late reply to {input}"}]}
"""
AGENTS_TOOL = "[{kind: Tool, name: agents, package: '@goondan/base'}]"


async def test_a_reply_reaches_a_caller_deactivated_to_make_room_while_it_waited(
    start_daemon: StartDaemon, tmp_path: Path
) -> None:
    """The caller's async `agents__request` is still being worked on when another instance
    needs its slot: the caller is deactivated, and the reply starts it again and reaches its
    durable inbox (a turn of its own takes it)."""
    policy = "{maxLiveInstances: 2, lifecycle: {idleTimeoutSeconds: null}}"
    caller = _agent("caller", "caller-script", AGENTS_TOOL)
    worker = _agent("worker", "worker-script")
    swarm = _swarm(["caller", "worker"], policy)
    docs = (HEAD + CALLER_SCRIPT, HEAD + WORKER_SCRIPT, caller, worker, swarm)
    async with asyncio.timeout(60):
        daemon = await start_daemon(_bundle(tmp_path, *docs), swarm="actors")
        asked = await daemon.send("job 7", "caller", key="a")
        assert asked.ok and json.loads(asked.result["input"])["output"]["async"] is True
        # the reply comes before the caller's `idle` report: until that is read it is busy,
        # and a send to b would find no idle instance to deactivate (E_AGENT_CAPACITY)
        await daemon.wait_for("transition", process="agent:caller:a:1", source="processing",
                              target="idle")  # fmt: skip
        assert (await daemon.send("hello", "caller", key="b")).ok  # a's slot: a was idle
        gone = await daemon.wait_for("transition", process="agent:caller:a:1", target="terminated")
        answered = await daemon.wait_for("transition", process="agent:caller:a:2",
                                         source="processing")  # fmt: skip
        assert daemon.lines.index(gone) < daemon.lines.index(answered)
        base = StateLayout.from_env().instance_paths("actors", "a", "caller").base_jsonl
        messages = [json.loads(line) for line in base.read_text().splitlines()]
        injected = [m for m in messages if "interAgentResponse" in m.get("metadata", {})]
        assert len(injected) == 1 and "late reply to job 7" in injected[0]["content"]


CLIENT_SCRIPT = """\
kind: Model
metadata: {name: client-script}
spec:
  provider: scripted
  model: client
  options:
    script:
      - afterTool: "*"
        reply: "{last_tool_result}"
      - match: "^confirm"
        toolCalls: [{name: client__confirm, args: {question: "{input}"}}]
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: client}
spec:
  exports:
    - name: confirm
      parameters: {type: object, properties: {question: {type: string}}}
      deferred: {method: ui.confirm}
"""


async def test_a_turn_waiting_for_its_client_is_deactivated_and_resumed_by_the_answer(
    start_daemon: StartDaemon, tmp_path: Path
) -> None:
    """A turn parked on a client-side call is idle: after the idle timeout its process exits,
    the pending call stays on disk, and the client's answer starts a new process that
    resumes the turn where it stopped."""
    policy = "{lifecycle: {idleTimeoutSeconds: 0.3, reconcileIntervalSeconds: 0.1}}"
    docs = (HEAD + CLIENT_SCRIPT, _agent("desk", "client-script", "[Tool/client]"),
            _swarm(["desk"], policy))  # fmt: skip
    async with asyncio.timeout(60):
        daemon = await start_daemon(_bundle(tmp_path, *docs), swarm="actors",
                                    env={"GOONDAN_HEARTBEAT_INTERVAL": "0.2"})  # fmt: skip
        reply = await daemon.send("confirm deploy?", key="u1")
        request: dict[str, Any] = reply.result["metadata"]["deferred"]
        assert request["method"] == "ui.confirm"
        await daemon.wait_for("idle_stop", process="agent:desk:u1:1")
        await daemon.wait_for("transition", process="agent:desk:u1:1", target="terminated")
        assert (await _row(daemon, "desk", "u1")).status == "deactivated"
        listed = await daemon.request(CallsList(request_id="l"))
        assert [c["id"] for c in listed.result["calls"]] == [request["id"]]  # on disk
        answer = CallsResolve(request_id="r", call_id=request["id"], result={"yes": True})
        resumed = await daemon.request(answer, limit=30)
        assert resumed.ok, resumed.error
        tool_result = json.loads(msgspec.convert(resumed.result, dict)["input"])
        assert tool_result == {"status": "ok", "output": {"yes": True}}
        assert (await _row(daemon, "desk", "u1")).generation == 2
