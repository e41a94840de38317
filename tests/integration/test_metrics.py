"""The daemon's `/metrics`: parsed with prometheus_client's own parser, its counters match the
runtime events the agents recorded during a scripted run (turns, steps, tool calls, errors,
tokens), and the process, mailbox, journal and dropped-frame figures match what happened."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import zmq
import zmq.asyncio
from prometheus_client.parser import text_string_to_metric_families

from protocol.endpoints import StateLayout
from tests.integration.conftest import StartDaemon
from tests.integration.harness import REPO, Daemon, run_cli
from tests.unit.agent_process.fake_llm import FakeLLMServer, chat_completion

BUNDLE = REPO / "tests" / "fixtures" / "metrics"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def scrape(port: int) -> tuple[httpx.Response, Samples]:
    async with httpx.AsyncClient() as client:
        response = await client.get(f"http://127.0.0.1:{port}/metrics")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return response, samples


def total(samples: Samples, metric: str, **labels: str) -> float:
    """The sum over samples of `metric` whose labels include `labels`."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == metric and want <= set(ls))


def runtime_events(swarm: str) -> list[dict[str, Any]]:
    root = StateLayout.from_env().swarm_instances_dir(swarm)
    events = []
    for path in root.glob("*/*/messages/runtime-events.jsonl"):
        events += [json.loads(line) for line in path.read_text().splitlines() if line]
    return events


async def turn(daemon: Daemon, text: str, agent: str, key: str | None = None) -> None:
    """One send, then the idle report that carries the turn's counters."""
    mark = daemon.mark()
    await daemon.send(text, agent, key=key)
    await daemon.wait_for("transition", since=mark, target="idle")


async def test_metrics_match_the_runtime_events_of_a_scripted_run(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(120):
        daemon = await start_daemon(BUNDLE, swarm="metered")
        port = daemon.find("metrics_listening")[0]["port"]
        for text in ("hello", "ok", "fail", "twice"):
            await turn(daemon, text, "alpha")
        await turn(daemon, "ok", "beta", key="k2")
        mark = daemon.mark()
        crashed = await daemon.send("die", "alpha")
        assert crashed.error is not None and crashed.error.code == "E_AGENT_CRASHED"
        await daemon.wait_for("transition", since=mark, target="crashed")
        await turn(daemon, "after", "alpha")  # generation 3 (the poison turn ran twice)
        await garbage(daemon)

        response, samples = await scrape(port)
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain")
        events = runtime_events("metered")

        ends = Counter((e["agent"], e["status"]) for e in events if e["type"].startswith("turn.")
                       and e["type"] != "turn.started")  # fmt: skip
        assert ends == {("alpha", "completed"): 5, ("beta", "completed"): 1}
        for (agent, outcome), count in ends.items():
            assert total(samples, "goondan_turns_total", agent=agent, outcome=outcome) == count
            assert total(samples, "goondan_turn_duration_seconds_count", agent=agent) == count
        steps = Counter(e["agent"] for e in events if e["type"] == "step.completed")
        for agent, count in steps.items():
            assert total(samples, "goondan_steps_total", agent=agent) == count
        tools = Counter((e["agent"], e["toolName"], e["status"]) for e in events
                        if e["type"] in ("tool.completed", "tool.failed"))  # fmt: skip
        assert tools == {("alpha", "t__ok", "ok"): 2, ("alpha", "t__fail", "error"): 2,
                         ("beta", "t__ok", "ok"): 1}  # fmt: skip
        for (agent, tool, status), count in tools.items():
            labels = {"agent": agent, "tool": tool, "status": status}
            assert total(samples, "goondan_tool_calls_total", **labels) == count
        assert total(samples, "goondan_errors_total", code="E_TEST_FAILS", source="tool") == 2
        for direction, key in (("input", "inputTokens"), ("output", "outputTokens")):
            used = sum(e["usage"][key] for e in events if e["type"] == "step.completed")
            assert used > 0
            assert total(samples, "goondan_tokens_total", model="metrics-script",
                         direction=direction) == used  # fmt: skip

        alpha = {"kind": "agent", "name": "alpha"}
        # "die" is a poison tool: its turn went once more to a replacement, which died too
        assert total(samples, "goondan_process_spawns_total", **alpha) == 3
        assert total(samples, "goondan_process_restarts_total", **alpha) == 2
        assert total(samples, "goondan_process_crashes_total", **alpha) == 2
        assert total(samples, "goondan_process_spawns_total", name="beta") == 1
        assert total(samples, "goondan_processes", name="alpha", state="idle") == 1
        assert total(samples, "goondan_mailbox_queued_events") == 0
        assert total(samples, "goondan_journal_unfinished_events") == 0
        assert total(samples, "goondan_dropped_frames_total", socket="agents",
                     reason="malformed") >= 1  # fmt: skip


async def garbage(daemon: Daemon) -> None:
    """A frame from no process: the agents socket drops it and counts it."""
    ctx = zmq.asyncio.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.IDENTITY, b"\x01garbage")
    try:
        sock.connect(f"ipc://{StateLayout.from_env().run_paths(daemon.swarm).agents_sock}")
        mark = daemon.mark()
        await sock.send(b"not a frame")
        await daemon.wait_for("frame_malformed", since=mark)
    finally:
        sock.close()
        ctx.term()


async def test_the_endpoint_answers_only_get_metrics_and_survives_bad_clients(
    start_daemon: StartDaemon,
) -> None:
    async with asyncio.timeout(60):
        daemon = await start_daemon(BUNDLE, swarm="metered")
        port = daemon.find("metrics_listening")[0]["port"]
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            assert (await client.get("/")).status_code == 404
            assert (await client.post("/metrics")).status_code == 405
            head = await client.head("/metrics")
            assert head.status_code == 200 and head.content == b""
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /metrics HTTP/1.1\r\n" + b"X-Big: " + b"a" * 20_000)  # no end of head
        await writer.drain()
        assert await reader.read() == b""  # dropped, not answered
        writer.close()
        _, samples = await scrape(port)
        assert total(samples, "goondan_journal_unfinished_events") == 0


async def test_a_taken_port_stops_the_daemon_with_a_coded_error(tmp_path: Path) -> None:
    async with asyncio.timeout(60):
        taken = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = taken.sockets[0].getsockname()[1]
        bundle = tmp_path / "b"
        shutil.copytree(BUNDLE, bundle)
        yaml = bundle / "goondan.yaml"
        yaml.write_text(yaml.read_text().replace("{port: 0}", f"{{port: {port}}}"))
        try:
            code, _, err = await run_cli("run", str(bundle), "--input", "hi")
        finally:
            taken.close()
        assert code == 1 and "E_METRICS_UNAVAILABLE" in err and str(port) in err


FLOOD = """
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: gpt}
spec:
  provider: openai
  model: gpt-test
  endpoint: __LLM__/v1
  apiKey: {value: sk-test}
  options: {maxRetries: 0, timeoutSeconds: 30}
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: t}
spec:
  entry: ./t.py
  exports: [{name: ok}, {name: fail}, {name: die}]
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: alpha}
spec:
  modelConfig: {modelRef: Model/gpt}
  tools: [Tool/t]
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: flooded}
spec:
  entryAgent: Agent/alpha
  agents: [Agent/alpha]
  observability:
    metrics: {port: 0}
"""
MADE_UP = 2000


async def test_tool_names_a_model_makes_up_are_one_series_not_thousands(
    start_daemon: StartDaemon, tmp_path: Path
) -> None:
    """Issue 27, F8: a model that calls 2,000 tools no catalog has (each call fails) made 2,000
    label values per family; now they are all `other`, beside the tool the agent has."""
    calls = [{"id": f"c{i}", "name": f"made_up_{i}", "args": {}} for i in range(MADE_UP)]
    calls.append({"id": "real", "name": "t__ok", "args": {}})
    async with asyncio.timeout(120), FakeLLMServer() as server:
        server.replies = [(200, chat_completion(tool_calls=calls)), (200, chat_completion("done"))]
        bundle = tmp_path / "flood"
        bundle.mkdir()
        shutil.copy(BUNDLE / "t.py", bundle / "t.py")
        llm = f"http://127.0.0.1:{server.port}"
        (bundle / "goondan.yaml").write_text(FLOOD.replace("__LLM__", llm))
        daemon = await start_daemon(bundle, swarm="flooded")
        port = daemon.find("metrics_listening")[0]["port"]
        await turn(daemon, "call them all", "alpha")
        response, samples = await scrape(port)
    tools = {dict(labels)["tool"] for (name, labels) in samples
             if name == "goondan_tool_calls_total"}  # fmt: skip
    assert tools == {"other", "t__ok"}
    assert total(samples, "goondan_tool_calls_total", tool="other", status="error") == MADE_UP
    assert total(samples, "goondan_tool_calls_total", tool="t__ok", status="ok") == 1
    assert total(samples, "goondan_errors_total", code="E_TOOL_NOT_IN_CATALOG") == MADE_UP
    assert len(response.content) < 64 * 1024  # about 0.5 MB per 100 made-up names before
