"""Benchmark: the same turns in goondan and in peer agent frameworks, against one local model.

The model is bench_broker's local OpenAI-compatible server (it answers "pong", streamed when
asked, and first calls the offered tool `*now` when a request offers tools). One process, the
orchestrator side of bench_broker's warm hop (the real router, supervisor, fork server and
journal: `run_in_harness`), drives, alternately so the machine's drift hits all:

- **bare**: the openai SDK itself (`AsyncOpenAI`), the baseline: one call for a one-call turn;
  two calls (the tool call, then the reply to its result) for a tool round trip; the first
  text chunk of a streamed call;
- **pydantic-ai** (`Agent.run`, a `tool_plain`, `run_stream` with text deltas) and the **OpenAI
  Agents SDK** (`Runner.run`, a `function_tool`, `Runner.run_streamed`'s first text delta),
  in this process, on the same `AsyncOpenAI` client, tracing off;
- **Goondan's Python host** (`goondan` 0.2 on PyPI, the `goondan` module: a library, not this
  project): `create_goondan(config, models=...)` in this process, its in-memory store, a new
  session per turn as the peers start from nothing; its `openai_chat_model` on one shared
  `httpx.AsyncClient` (without one it opens a client, and builds a TLS context, per call),
  a `define_tool` tool; its model calls are always streamed, so its one-call turn is a
  streamed call where the baseline's is not, and its first delta is its first
  `step.textDelta` event;
- **goondan**: the warm hop: an event submitted to the router, the turn in the agent's own
  process (forked by the fork server, its model on the `openai` provider pointed at the same
  server), the reply back through the router; its conversation is persisted and grows over
  the 5 turns each instance gets, where the peers start from nothing each run; streamed, the
  first text delta as the router passes it on. (What a `goondan send` adds on top, the CLI's
  control socket and the journal, is in bench_stream.)

Each row is a ratio to the bare SDK doing the same model calls in the same run; what a
framework adds is its median minus the baseline's. The baseline, like the peers, uses the SDK's
typed `chat.completions.create`; goondan's `openai` adapter posts the same request and decodes
the reply with msgspec instead (agent_process/models/openai_chat.py), part of what it saves.
Needs the `bench` extra (`pip install 'goondan-daemon[bench]'`); without it the table says it
skipped. `BENCH_PEERS_TURNS` (default 300) makes a run shorter.

Run: `python -m tests.bench bench_peers`.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from tests.bench.baselines import Row, p99, print_rows, stalls
from tests.bench.bench_broker import HOP_BUNDLE, role_samples, run_in_harness
from tests.bench.bench_stream import _first_token

TURNS = int(os.environ.get("BENCH_PEERS_TURNS", "300"))
PER_INSTANCE = 5
WARMUP = 20
BUNDLE = (
    HOP_BUNDLE.replace("agents: [Agent/hop]", "agents: [Agent/hop, Agent/tooled]")
    + """
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: clock}
spec:
  entry: ./clock.py
  exports: [{name: now, description: The time now.}]
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: tooled}
spec: {modelConfig: {modelRef: Model/local}, tools: [Tool/clock]}
"""
)
"""bench_broker's warm hop bundle, and an agent with one tool."""
CLOCK = """async def now(ctx, input):
    return "noon"


handlers = {"now": now}
"""
PEERS = {"pydantic_ai": "pydantic_ai", "agents": "agents", "seed": "goondan"}
"""The peers' sides in the samples -> the module each needs (the `bench` extra)."""
Turn = Callable[[int], Awaitable[float]]
"""One measured turn (its index) -> µs."""


def _timed(run: Callable[[str], Awaitable[Any]]) -> Turn:
    async def turn(i: int) -> float:
        start = time.perf_counter()
        await run(f"ping {i}")
        return (time.perf_counter() - start) * 1e6

    return turn


def _bare(client: Any) -> dict[str, Turn]:
    async def one(text: str) -> None:
        done = await client.chat.completions.create(
            model="local", messages=[{"role": "user", "content": text}]
        )
        assert done.choices[0].message.content == "pong"

    tools = [{"type": "function", "function": {"name": "now", "description": "The time now.",
                                               "parameters": {"type": "object"}}}]  # fmt: skip

    async def tool(text: str) -> None:
        messages: list[Any] = [{"role": "user", "content": text}]
        first = await client.chat.completions.create(model="local", messages=messages,
                                                     tools=tools)  # fmt: skip
        call = first.choices[0].message.tool_calls[0]
        messages += [first.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": "noon"}]  # fmt: skip
        done = await client.chat.completions.create(model="local", messages=messages,
                                                    tools=tools)  # fmt: skip
        assert done.choices[0].message.content == "pong"

    async def first(i: int) -> float:
        return (await _first_token(client, i))[0]

    return {"call": _timed(one), "tool": _timed(tool), "first": first}


def _pydantic_ai(client: Any) -> dict[str, Turn]:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel("local", provider=OpenAIProvider(openai_client=client))
    plain = Agent(model)
    tooled = Agent(model)

    @tooled.tool_plain
    def now() -> str:
        """The time now."""
        return "noon"

    async def one(text: str) -> None:
        assert (await plain.run(text)).output == "pong"

    async def tool(text: str) -> None:
        assert (await tooled.run(text)).output == "pong"

    async def first(i: int) -> float:
        start = time.perf_counter()
        took = 0.0
        async with plain.run_stream(f"ping {i}") as result:
            async for delta in result.stream_text(delta=True):
                if delta and not took:
                    took = time.perf_counter() - start
        return took * 1e6

    return {"call": _timed(one), "tool": _timed(tool), "first": first}


def _openai_agents(client: Any) -> dict[str, Turn]:
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from openai.types.responses import ResponseTextDeltaEvent

    set_tracing_disabled(True)
    model = OpenAIChatCompletionsModel(model="local", openai_client=client)

    @function_tool
    def now() -> str:
        """The time now."""
        return "noon"

    plain = Agent(name="hop", model=model)
    tooled = Agent(name="tooled", model=model, tools=[now])

    async def one(text: str) -> None:
        assert (await Runner.run(plain, text)).final_output == "pong"

    async def tool(text: str) -> None:
        assert (await Runner.run(tooled, text)).final_output == "pong"

    async def first(i: int) -> float:
        start = time.perf_counter()
        took = 0.0
        result = Runner.run_streamed(plain, f"ping {i}")
        async for event in result.stream_events():
            data = getattr(event, "data", None)
            if not took and isinstance(data, ResponseTextDeltaEvent) and data.delta:
                took = time.perf_counter() - start
        return took * 1e6

    return {"call": _timed(one), "tool": _timed(tool), "first": first}


def _seed(port: int) -> tuple[dict[str, Turn], Callable[[], Awaitable[None]]]:
    """Goondan's Python host's turns, and what closes it."""
    import httpx
    from goondan import create_goondan, define_tool  # type: ignore[import-untyped]
    from goondan.models import openai_chat_model  # type: ignore[import-untyped]

    http = httpx.AsyncClient()
    model = openai_chat_model(model="local", base_url=f"http://127.0.0.1:{port}/v1",
                              api_key="sk-local", http_client=http)  # fmt: skip

    async def now(args: Any, ctx: Any) -> str:
        return "noon"

    clock = define_tool(name="now", description="The time now.", input={"type": "object"},
                        execute=now)  # fmt: skip
    first: list[float] = []

    def emit(event: dict[str, Any]) -> None:
        if not first and event["type"] == "step.textDelta" and event["data"].get("delta"):
            first.append(time.perf_counter())

    agents = {"hop": {"model": "local"}, "tooled": {"model": "local", "tools": ["now"]}}
    config = {"name": "bench", "routes": ["hop"], "agents": agents}
    host = create_goondan(config=config, models={"local": model}, tools={"now": clock}, emit=emit)

    async def run(text: str, agent: str = "hop") -> None:
        result = await (await host.run(text, agent=agent)).result
        assert result["output"] == "pong", result

    async def tool(text: str) -> None:
        await run(text, "tooled")

    async def delta(i: int) -> float:
        first.clear()
        start = time.perf_counter()
        await run(f"ping {i}")
        return (first[0] - start) * 1e6

    async def close() -> None:
        await host.close()
        await http.aclose()

    return {"call": _timed(run), "tool": _timed(tool), "first": delta}, close


def _goondan(harness: Any) -> tuple[dict[str, Turn], Callable[[int], Awaitable[None]]]:
    """goondan's turns on the warm hop, and what starts the instances of sample `n` (one
    warm-up turn each)."""
    from protocol.events import ReplyTo, Source, SourceKind, new_event
    from protocol.ids import agent_address
    from protocol.stream import DeltaKind, StreamDelta

    cli = Source(kind=SourceKind.CLI, name="bench")
    keys = {"hop": "", "tooled": ""}

    async def turn(agent: str, i: int, stream: bool = False) -> tuple[float, float]:
        """(µs to the first text delta (0 unstreamed), µs to the reply)."""
        key = keys[agent]
        correlation_id = f"{key}-{i}-{stream}"
        waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        first: list[float] = []

        def sink(delta: StreamDelta) -> None:
            if not first and delta.kind is DeltaKind.TEXT:
                first.append(time.perf_counter())

        if stream:  # the router hands the turn's deltas here, as to a streaming send
            harness.router.deltas.watch(correlation_id, sink)
        event = new_event(
            type="user.message", input=f"ping {i}", instance_key=key, source=cli,
            reply_to=ReplyTo(target="control", correlation_id=correlation_id, stream=stream),
        )  # fmt: skip
        start = time.perf_counter()
        harness.router.submit(event, agent_address(agent, key), waiter)
        reply = await waiter
        end = time.perf_counter()
        harness.router.deltas.unwatch(correlation_id)
        assert reply.error is None and reply.input == "pong", reply
        return ((first[0] - start) * 1e6 if first else 0.0), (end - start) * 1e6

    async def spawn(n: int) -> None:
        for agent in keys:
            keys[agent] = f"{agent}{n}"
            await harness.spawn(keys[agent], agent)
            await turn(agent, -1)

    async def one(i: int) -> float:
        return (await turn("hop", i))[1]

    async def tool(i: int) -> float:
        return (await turn("tooled", i))[1]

    async def first(i: int) -> float:
        return (await turn("hop", 1000 + i, stream=True))[0]

    return {"call": one, "tool": tool, "first": first}, spawn


async def _measure(harness: Any, port: int) -> dict[str, list[float]]:
    import openai

    client = openai.AsyncOpenAI(api_key="sk-local", base_url=f"http://127.0.0.1:{port}/v1")
    seed, close_seed = _seed(port)
    try:
        ours, spawn = _goondan(harness)
        sides = {"bare": _bare(client), "pydantic_ai": _pydantic_ai(client),
                 "agents": _openai_agents(client), "seed": seed, "goondan": ours}  # fmt: skip
        out: dict[str, list[float]] = {}
        await spawn(-1)
        for i in range(WARMUP):
            for side in sides.values():
                for turn in side.values():
                    await turn(i)
        for n in range(TURNS // PER_INSTANCE):
            await spawn(n)
            for i in range(PER_INSTANCE):  # alternated, so the machine's drift hits all
                # and in turn first: what a side leaves running after its turn (goondan's
                # agent, journal and router finish their bookkeeping after the reply) does
                # not always land on the same next side
                names = list(sides)
                start = (n * PER_INSTANCE + i) % len(names)
                for name in names[start:] + names[:start]:
                    for kind, turn in sides[name].items():
                        out.setdefault(f"{name}.{kind}", []).append(await turn(i))
        return out
    finally:
        await close_seed()
        await client.close()


LABELS = {"bare": "openai SDK alone (baseline)", "pydantic_ai": "pydantic-ai",
          "agents": "OpenAI Agents SDK", "seed": "Goondan's Python host 0.2 (streamed)",
          "goondan": "goondan warm hop (persisted)"}  # fmt: skip
KINDS = {"call": "one model call", "tool": "one tool round trip (2 model calls)",
         "first": "first text delta of a streamed call"}  # fmt: skip


def _rows(out: dict[str, list[float]]) -> list[Row]:
    rows = []
    for kind, what in KINDS.items():
        base = statistics.median(out[f"bare.{kind}"])
        best = min(statistics.median(out[f"{peer}.{kind}"]) for peer in PEERS) / base
        for name, label in LABELS.items():
            values = out[f"{name}.{kind}"]
            median = statistics.median(values)
            added = "" if name == "bare" else f" (+{median - base:.0f} µs)"
            goal = f"≤ {best:.2f}x" if name == "goondan" else ""  # ahead of the best peer
            rows.append(Row(f"{what}: {label}{added}", median, p99(values), "µs", base, goal,
                            stalls(values)))  # fmt: skip
    return rows


def _role() -> None:
    out = run_in_harness(BUNDLE, ("hop", "tooled"), _measure, {"clock.py": CLOCK})
    print(json.dumps(out), flush=True)


def run() -> list[Row]:
    return _rows(role_samples("bench_peers", "role", timeout=1200))


def main() -> list[Row]:
    missing = [m for m in PEERS.values() if importlib.util.find_spec(m) is None]
    if missing:
        print(f"bench_peers skipped: {', '.join(missing)} not installed "
              "(pip install 'goondan-daemon[bench]')")  # fmt: skip
        return []
    rows = run()
    print_rows(
        f"goondan and its peers on the same turns against one local model server ({TURNS} "
        "samples of each, alternated; + is the median added to the bare SDK's)",
        rows,
    )
    return rows


if __name__ == "__main__":
    if sys.argv[1:] == ["role"]:
        _role()
    else:
        main()
