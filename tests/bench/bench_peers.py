"""Benchmark: the same turns in goondan and in peer agent frameworks, against one local model.

The model is bench_broker's local OpenAI-compatible server (it answers "pong", streamed when
asked, and first calls the offered tool `*now` when a request offers tools). One process
drives, alternately so the machine's drift hits all:

- **bare**: the openai SDK itself (`AsyncOpenAI`), the baseline: one call for a one-call turn;
  two calls (the tool call, then the reply to its result) for a tool round trip; the first
  text chunk of a streamed call;
- **pydantic-ai** (`Agent.run`, a `tool_plain`, `run_stream` with text deltas) and the **OpenAI
  Agents SDK** (`Runner.run`, a `function_tool`, `Runner.run_streamed`'s first text delta),
  in this process, on the same `AsyncOpenAI` client, tracing off;
- **goondan**: a real `goondan run` daemon (fork server), its agents on the `openai` provider
  pointed at the same server, reached as `goondan send` reaches it (a control request over a
  kept DEALER, accepted through the journal); its conversations are persisted, and grow over
  the 5 turns each instance gets, where the peers start from nothing each run.

Each row is a ratio to the bare SDK doing the same model calls in the same run; what a
framework adds is its median minus the baseline's. Needs the `bench` extra (`pip install
'goondan[bench]'`); without it the table says it skipped. `BENCH_PEERS_TURNS` (default 300)
makes a run shorter.

Run: `python -m tests.bench bench_peers`.
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tests.bench.baselines import Row, p99, print_rows, stalls
from tests.bench.bench_broker import HOP_BUNDLE
from tests.bench.bench_stream import _Control, _first_token, _start_daemon, model_server

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
PEERS = ("pydantic_ai", "agents")
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


def _goondan(control: _Control) -> tuple[dict[str, Turn], Callable[[int], None]]:
    """goondan's turns, and what starts the instances of sample `n` (one warm-up turn each)."""
    keys = {"hop": "", "tooled": ""}

    def spawn(n: int) -> None:
        for agent in keys:
            keys[agent] = f"{agent}{n}"
            control.send(keys[agent], -1, False, agent)

    async def one(i: int) -> float:
        return control.send(keys["hop"], i, False, "hop")[1]

    async def tool(i: int) -> float:
        return control.send(keys["tooled"], i, False, "tooled")[1]

    async def first(i: int) -> float:
        return control.send(keys["hop"], 1000 + i, True, "hop")[0]

    return {"call": one, "tool": tool, "first": first}, spawn


async def _drive(bundle: Path, port: int) -> dict[str, list[float]]:
    import openai

    from orchestrator.rundir import read_active, read_token
    from protocol.endpoints import StateLayout

    daemon = _start_daemon(bundle, b'"event": "started"')
    client = openai.AsyncOpenAI(api_key="sk-local", base_url=f"http://127.0.0.1:{port}/v1")
    try:
        info = read_active(StateLayout.from_env().run_paths("hop").active_json)
        assert info is not None
        endpoint = info.endpoints["control"]
        # the control client blocks the loop while it waits: nothing else runs meanwhile
        control = _Control(endpoint, read_token(endpoint))
        ours, spawn = _goondan(control)
        sides = {"bare": _bare(client), "pydantic_ai": _pydantic_ai(client),
                 "agents": _openai_agents(client), "goondan": ours}  # fmt: skip
        out: dict[str, list[float]] = {}
        spawn(-1)
        for i in range(WARMUP):
            for side in sides.values():
                for turn in side.values():
                    await turn(i)
        for n in range(TURNS // PER_INSTANCE):
            spawn(n)
            for i in range(PER_INSTANCE):  # alternated, so the machine's drift hits all
                for name, side in sides.items():
                    for kind, turn in side.items():
                        out.setdefault(f"{name}.{kind}", []).append(await turn(i))
        control.close()
        return out
    finally:
        await client.close()
        daemon.terminate()
        daemon.wait(60)


LABELS = {"bare": "openai SDK alone (baseline)", "pydantic_ai": "pydantic-ai",
          "agents": "OpenAI Agents SDK", "goondan": "goondan (send, persisted)"}  # fmt: skip
KINDS = {"call": "one model call", "tool": "one tool round trip (2 model calls)",
         "first": "first text delta of a streamed call"}  # fmt: skip


def _rows(out: dict[str, list[float]]) -> list[Row]:
    rows = []
    for kind, what in KINDS.items():
        base = statistics.median(out[f"bare.{kind}"])
        for name, label in LABELS.items():
            values = out[f"{name}.{kind}"]
            median = statistics.median(values)
            added = "" if name == "bare" else f" (+{median - base:.0f} µs)"
            goal = "ahead of the peers" if name == "goondan" else ""
            rows.append(Row(f"{what}: {label}{added}", median, p99(values), "µs", base, goal,
                            stalls(values)))  # fmt: skip
    return rows


def run() -> list[Row]:
    import uvloop

    with model_server("gp") as (port, tmp):
        bundle = tmp / "goondan.yaml"
        bundle.write_text(BUNDLE.replace("PORT", str(port)))
        (tmp / "clock.py").write_text(CLOCK)
        out = uvloop.run(_drive(bundle, port))
    return _rows(out)


def main() -> list[Row]:
    missing = [m for m in PEERS if importlib.util.find_spec(m) is None]
    if missing:
        print(f"bench_peers skipped: {', '.join(missing)} not installed "
              "(pip install 'goondan[bench]')")  # fmt: skip
        return []
    rows = run()
    print_rows(
        f"goondan and its peers on the same turns against one local model server ({TURNS} "
        "samples of each, alternated; + is the median added to the bare SDK's)",
        rows,
    )
    return rows


if __name__ == "__main__":
    main()
