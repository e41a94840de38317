"""Benchmark: `agents__request` round trip through the real daemon, seen from the caller.

A real `goondan run` daemon runs a caller (scripted model: one `agents__request` per turn) and a
worker that answers at once, either with the scripted model or with the `openai` provider
against a local OpenAI-compatible server (tests.bench.bench_broker's `llm` role). The figure is
the caller's tool call (tool issued -> tool result back: `durationMs` of its `tool.completed`
runtime event), so it covers bridge -> router -> worker turn -> router -> bridge. The baseline
is the bare brokered round trip (tests.bench.baselines: bare broker, blocking DEALERs),
measured in the same run. Every reply must produce exactly one caller turn: caller turns are
counted against the requests sent.

Run: `python -m tests.bench bench_agents_request` (or `python -m tests.bench.bench_agents_request`).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from protocol.endpoints import StateLayout
from tests.bench.baselines import Row, p99, print_rows

INSTANCES = 40
PER_INSTANCE = 5
"""Requests measured per caller instance after one warm-up (conversations stay short)."""
BARE_RTTS = 2000
ROOT = "/dev/shm" if Path("/dev/shm").is_dir() else None
CALLER = """
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: caller-script}
spec:
  provider: scripted
  model: caller
  options:
    script:
      - {afterTool: agents__request, reply: done}
      - toolCalls: [{name: agents__request, args: {target: worker, input: "{input}"}}]
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: caller}
spec: {modelConfig: {modelRef: Model/caller-script}, tools: [Tool/agents]}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: worker}
spec: {modelConfig: {modelRef: Model/WORKER_MODEL}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: bench}
spec: {entryAgent: Agent/caller, agents: [Agent/caller, Agent/worker]}
"""
SCRIPTED_WORKER = """
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: worker-script}
spec: {provider: scripted, model: worker, options: {script: [{reply: pong}]}}
"""
OPENAI_WORKER = """
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: local}
spec: {provider: openai, model: local, endpoint: "http://127.0.0.1:PORT/v1",
       apiKey: {value: sk-local}}
"""


def _bundle(directory: Path, provider: str, port: int | None) -> Path:
    if provider == "openai":
        text = CALLER.replace("WORKER_MODEL", "local") + OPENAI_WORKER.replace("PORT", str(port))
    else:
        text = CALLER.replace("WORKER_MODEL", "worker-script") + SCRIPTED_WORKER
    path = directory / "goondan.yaml"
    path.write_text(text)
    return path


def _tool_durations(layout: StateLayout, key: str) -> tuple[list[float], int]:
    """(agents__request durations in µs, caller turns) of one caller instance."""
    path = layout.instance_paths("bench", key, "caller").runtime_events_jsonl
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    durations = [
        float(e["durationMs"]) * 1000
        for e in events
        if e["type"] == "tool.completed" and e.get("toolName") == "agents__request"
    ]
    turns = sum(1 for e in events if e["type"] == "turn.started")
    return durations, turns


async def _drive(bundle: Path, layout: StateLayout) -> tuple[list[float], int, int]:
    from tests.integration.harness import Daemon

    daemon = await Daemon.start(bundle, swarm="bench")
    try:
        sent = 0
        for n in range(INSTANCES):
            key = f"i{n}"
            for i in range(PER_INSTANCE + 1):  # the first one spawns both processes
                reply = await daemon.send(f"ping {i}", "caller", key=key)
                assert reply.ok, reply.error
                sent += 1
        durations: list[float] = []
        turns = 0
        for n in range(INSTANCES):
            found, count = _tool_durations(layout, f"i{n}")
            durations += found[1:]
            turns += count
        return durations, turns, sent
    finally:
        await daemon.close()


def _measure(provider: str, port: int | None) -> tuple[list[float], int, int]:
    with tempfile.TemporaryDirectory(prefix="ga", dir=ROOT) as tmp:
        state = Path(tmp) / "s"
        os.environ["GOONDAN_STATE_ROOT"] = str(state)
        layout = StateLayout.from_env()
        return asyncio.run(_drive(_bundle(Path(tmp), provider, port), layout))


def _bare_rtt_ms() -> list[float]:
    with tempfile.TemporaryDirectory(prefix="gb", dir=ROOT) as tmp:
        endpoint = f"ipc://{Path(tmp) / 'b.sock'}"
        role = [sys.executable, "-m", "tests.bench.baselines"]
        procs = [
            subprocess.Popen([*role, "broker", endpoint]),
            subprocess.Popen([*role, "worker", endpoint]),
        ]
        try:
            out = subprocess.run(
                [*role, "client", endpoint, str(BARE_RTTS), "10", "100"],
                capture_output=True, text=True, timeout=300, check=True,
            ).stdout  # fmt: skip
        finally:
            for proc in procs:
                proc.kill()
                proc.wait()
    rtts: list[float] = json.loads(out)["rtt_us"]
    return rtts


async def _model_call_alone(port: int, n: int = 300) -> list[float]:
    """The worker's model call by itself (openai SDK -> local server, the request the adapter
    makes), for the breakdown."""
    import time

    import openai
    from openai.types.chat import ChatCompletion

    client = openai.AsyncOpenAI(api_key="sk-local", base_url=f"http://127.0.0.1:{port}/v1")
    out = []
    for i in range(n):
        start = time.perf_counter()
        body = {"model": "local", "messages": [{"role": "user", "content": f"ping {i}"}]}
        await client.post("/chat/completions", body=body, cast_to=ChatCompletion)
        out.append((time.perf_counter() - start) * 1e6)
    await client.close()
    return out[n // 10 :]


def run() -> list[Row]:
    bare = _bare_rtt_ms()
    base = statistics.median(bare)
    rows = [Row("bare brokered round trip (baseline)", base, p99(bare), "µs", base)]
    llm = subprocess.Popen(
        [sys.executable, "-m", "tests.bench.bench_broker", "llm"], stdout=subprocess.PIPE
    )
    try:
        assert llm.stdout is not None
        port = int(llm.stdout.readline())
        alone = asyncio.run(_model_call_alone(port))
        rows.append(
            Row(
                "model call alone (openai SDK, as the worker)",
                statistics.median(alone),
                p99(alone),
                "µs",
            )
        )
        for provider, goal in (("scripted", ""), ("openai", "≤ 3000 µs p50")):
            durations, turns, sent = _measure(provider, port)
            rows.append(
                Row(
                    f"agents__request, worker on {provider}",
                    statistics.median(durations),
                    p99(durations),
                    "µs",
                    base,
                    goal,
                )
            )
            rows.append(
                Row(
                    f"caller turns per reply ({provider}: {turns}/{sent})",
                    turns / sent,
                    None,
                    "turns",
                    None,
                    "exactly 1",
                )
            )
    finally:
        llm.kill()
        llm.wait()
    return rows


def main() -> list[Row]:
    rows = run()
    print_rows(
        f"agents__request round trip seen from the caller through the real daemon "
        f"({INSTANCES} instances x {PER_INSTANCE} requests, after one warm-up each)",
        rows,
    )
    return rows


if __name__ == "__main__":
    main()
