"""Benchmark: the permit an agent asks for before each model call (budgets, shared rate limits).

A real `goondan run` daemon runs agents on the scripted model with a daily budget and a Model
rate limit high enough never to make them wait, so every model call asks the orchestrator for a
permit (`model_permit`: agent DEALER -> orchestrator ROUTER -> budget check and bucket -> reply)
and reports its usage after. The figure is what the permit adds to the call, as the agent
measures it around the call (`permitMs` of its `model.usage` runtime events). Two rows: a
turn's first call, whose permit was asked as the turn started (agent_process/permit_ahead.py),
and a later step's call (after a tool call), which asks at the call. The baseline is the same
shape with no goondan code, measured in the same run: an asyncio DEALER on uvloop sending one
msgpack frame to an asyncio ROUTER on uvloop that decodes it with a typed msgspec decoder and
answers.

Run: `python -m tests.bench bench_permits` (or `python -m tests.bench.bench_permits`).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from protocol.endpoints import StateLayout
from tests.bench.baselines import Row, p99, print_rows, stalls

INSTANCES = 4
TURNS = 100
"""Turns measured per instance, after one warm-up each (one model call per turn)."""
STEPPED = 2
"""Instances whose turns call a tool, then the model again (a later step's permit)."""
ECHOES = 3000
ROOT = "/dev/shm" if Path("/dev/shm").is_dir() else None
BUNDLE = """
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: m}
spec:
  provider: scripted
  model: permits
  options:
    script:
      - {afterTool: "*", reply: ok}
      - {match: "^step", toolCalls: [{name: file-system__list, args: {path: "."}}]}
      - {reply: ok}
  rateLimit: {requestsPerMinute: 6000000}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: metered}
spec:
  modelConfig: {modelRef: Model/m}
  tools: [{ref: {kind: Tool, name: file-system, package: "@goondan/base"}}]
  policy: {budget: {turnsPerDay: 100000000, tokensPerDay: 100000000}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: bench}
spec: {entryAgent: Agent/metered, agents: [Agent/metered]}
"""


# -- the baseline: one bare DEALER -> ROUTER -> DEALER round trip --------------------------


def echo(endpoint: str) -> None:
    """The bare ROUTER: decode each frame (typed, as the router does) and answer it."""
    import msgspec
    import uvloop
    import zmq
    import zmq.asyncio

    from protocol.messages import Call, CallResult, CallResultPayload

    decoder = msgspec.msgpack.Decoder(Call)
    encoder = msgspec.msgpack.Encoder()

    async def run() -> None:
        sock = zmq.asyncio.Context().socket(zmq.ROUTER)
        sock.bind(endpoint)
        while True:
            ident, data = await sock.recv_multipart()
            call = decoder.decode(data)
            result = CallResultPayload(call_id=call.payload.call_id, ok=True, result={})
            reply = CallResult(from_="orchestrator", to=call.from_, payload=result)
            await sock.send_multipart([ident, encoder.encode(reply)])

    uvloop.run(run())


async def _echo_client(endpoint: str, n: int) -> list[float]:
    import msgspec
    import zmq
    import zmq.asyncio

    from protocol.messages import Call, CallOp, CallPayload

    encoder = msgspec.msgpack.Encoder()
    sock = zmq.asyncio.Context().socket(zmq.DEALER)
    sock.connect(endpoint)
    out = []
    args = {"model": "m", "eventId": "e" * 32, "estimatedTokens": 12}
    for i in range(n + n // 10):
        payload = CallPayload(call_id=f"{i:032x}", op=CallOp.MODEL_PERMIT, args=args)
        frame = encoder.encode(Call(from_="agent:metered:k:1", to="orchestrator", payload=payload))
        start = time.perf_counter()
        await sock.send(frame)
        await sock.recv()
        out.append((time.perf_counter() - start) * 1e6)
    sock.close(linger=0)
    return out[n // 10 :]


def _bare(tmp: Path) -> list[float]:
    import uvloop

    endpoint = f"ipc://{tmp / 'echo.sock'}"
    server = subprocess.Popen([sys.executable, "-m", "tests.bench.bench_permits", "echo", endpoint])
    try:
        return uvloop.run(_echo_client(endpoint, ECHOES))
    finally:
        server.kill()
        server.wait()


# -- the figure: permits through the real daemon -------------------------------------------


async def _drive(bundle: Path) -> None:
    from tests.integration.harness import Daemon

    daemon = await Daemon.start(bundle, swarm="bench")
    try:
        for key, text in _runs():
            for i in range(TURNS + 1):  # the first one spawns the process
                reply = await daemon.send(f"{text} {i}", "metered", key=key)
                assert reply.ok, reply.error
    finally:
        await daemon.close()


def _runs() -> list[tuple[str, str]]:
    """(instance key, input): one-step turns, then turns of two steps around a tool call."""
    return [(f"i{n}", "ping") for n in range(INSTANCES)] + [
        (f"s{n}", "step") for n in range(STEPPED)
    ]


def _permits(tmp: Path) -> tuple[list[float], list[float]]:
    """(first calls of turns, later steps' calls): µs each, after each warm-up turn."""
    os.environ["GOONDAN_STATE_ROOT"] = str(tmp / "s")
    layout = StateLayout.from_env()
    (tmp / "goondan.yaml").write_text(BUNDLE)
    asyncio.run(_drive(tmp / "goondan.yaml"))
    first: list[float] = []
    later: list[float] = []
    for key, _ in _runs():
        path = layout.instance_paths("bench", key, "metered").runtime_events_jsonl
        events = [json.loads(line) for line in path.read_text().splitlines()]
        turns: dict[str, list[float]] = {}
        for e in events:
            if e["type"] == "model.usage":
                turns.setdefault(e["traceId"], []).append(e["data"]["permitMs"] * 1000)
        for calls in list(turns.values())[1:]:  # after the warm-up turn
            first.append(calls[0])
            later += calls[1:]
    return first, later


def run() -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="gp", dir=ROOT) as tmp:
        bare = _bare(Path(tmp))
        first, later = _permits(Path(tmp))
    base = statistics.median(bare)
    return [
        Row("bare DEALER->ROUTER round trip (baseline)", base, p99(bare), "µs", base,
            stalls=stalls(bare)),
        Row(f"permit, turn's first call, asked ahead ({len(first)})", statistics.median(first),
            p99(first), "µs", base, "≤ 200 µs p50", stalls(first)),
        Row(f"permit, later step, asked at the call ({len(later)})", statistics.median(later),
            p99(later), "µs", base, "≤ 200 µs p50", stalls(later)),
    ]  # fmt: skip


def main() -> list[Row]:
    rows = run()
    print_rows(
        f"permit per model call through the real daemon ({INSTANCES} + {STEPPED} instances x "
        f"{TURNS} turns, budget and rate limit on, never waiting)",
        rows,
    )
    return rows


if __name__ == "__main__":
    if sys.argv[1:2] == ["echo"]:
        echo(sys.argv[2])
    else:
        main()
