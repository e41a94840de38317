"""Benchmark: one tool call through registry + schema validation + 3 middleware + async handler.

Run: `python -m tests.bench.bench_tool_call` (or `main()`). Prints µs per call (median and p99)
and the ratio to a bare `await handler(ctx, args)` measured in the same run, once without and
once with the call's runtime events (`tool.called`, `tool.completed`) recorded the way the
runtime records them: encoded into an in-memory buffer that is written to
`runtime-events.jsonl` every 512 events and at the turn's end (its durability point).
Variants take turns within each round so the shared machine's drift hits them alike.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from agent_process.catalog import CatalogBuilder
from agent_process.middleware_contexts import StepContext, ToolCallMwContext, TurnContext
from agent_process.pipeline import Pipelines
from agent_process.registry import SourceKind, ToolEntry, ToolOrigin, ToolRegistry
from agent_process.schema import ArgsValidator
from agent_process.store import ConversationStore
from agent_process.telemetry import EventBus
from agent_process.toolcall import ToolCallRunner
from protocol.conversation import Role, ToolCall, new_message
from protocol.events import Source, TraceContext, new_event
from protocol.events import SourceKind as EventSource
from tests.bench.baselines import Row, print_rows

ROUNDS = 7
CALLS_PER_ROUND = 3000
WARMUP = 2000
SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
    "additionalProperties": False,
}


async def add(ctx: Any, args: dict[str, Any]) -> dict[str, int]:
    return {"sum": args["a"] + args["b"]}


async def passthrough(ctx: ToolCallMwContext) -> Any:
    return await ctx.next()


def build_runner(bus: EventBus) -> tuple[ToolCallRunner, StepContext]:
    registry = ToolRegistry()
    registry.add(
        ToolEntry(
            name="calc__add",
            handler=add,
            is_async=True,
            origin=ToolOrigin(SourceKind.CONFIG, "calc"),
            parameters=SCHEMA,
        )
    )
    pipelines = Pipelines()
    for owner in ("a", "b", "c"):
        pipelines.register("toolCall", passthrough, owner=owner)
    runner = ToolCallRunner(
        registry=registry,
        pipelines=pipelines,
        bus=bus,
        workdir=Path(tempfile.gettempdir()),
        logger=None,
        runtime=None,  # type: ignore[arg-type]
        secret_values=frozenset(),
    )
    event = new_event(
        type="bench", input="", instance_key="k", source=Source(kind=EventSource.CLI, name="b")
    )
    store = ConversationStore(Path(tempfile.gettempdir()) / "unused")
    turn = TurnContext(
        event=event,
        turn_id="t",
        agent_name="a",
        instance_key="k",
        conversation=store,
        span=TraceContext.root(),
    )
    step = StepContext(turn=turn, index=1, catalog=CatalogBuilder(registry), span=turn.span.child())
    step.catalog_names = frozenset(i.name for i in step.tool_catalog)
    return runner, step


async def sample(fn: Callable[[], Awaitable[Any]], n: int) -> list[float]:
    out = []
    clock = time.perf_counter_ns
    for _ in range(n):
        start = clock()
        await fn()
        out.append((clock() - start) / 1000)
    return out


async def run() -> dict[str, list[float]]:
    call = ToolCall(id="call_1", name="calc__add", args={"a": 2, "b": 3})
    message = new_message(Role.ASSISTANT, "", tool_calls=[call])
    with tempfile.TemporaryDirectory() as tmp:
        quiet_runner, quiet_step = build_runner(EventBus(None, agent="a", instance_key="k"))
        bus = EventBus(Path(tmp) / "runtime-events.jsonl", agent="a", instance_key="k")
        bus.open()
        loud_runner, loud_step = build_runner(bus)
        ctx = object()
        args = call.args
        variants: dict[str, Callable[[], Awaitable[Any]]] = {
            "bare await handler(ctx, args)": lambda: add(ctx, args),
            "tool call, no event recording": lambda: quiet_runner.run(quiet_step, call, message),
            "tool call, events recorded": lambda: loud_runner.run(loud_step, call, message),
        }
        result = await quiet_runner.run(quiet_step, call, message)
        assert result.status.value == "ok" and result.output == {"sum": 5}, result
        samples: dict[str, list[float]] = {name: [] for name in variants}
        for fn in variants.values():
            await sample(fn, WARMUP)
        for _ in range(ROUNDS):
            for name, fn in variants.items():
                samples[name] += await sample(fn, CALLS_PER_ROUND)
            bus.flush()  # the turn-end durability point
        bus.close()
    return samples


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98]


GOALS = {
    "tool call, no event recording": "≤ 10 µs p50",
    "tool call, events recorded": "≤ 20 µs p50",
}


def main() -> list[Row]:
    samples = asyncio.run(run())
    bare = statistics.median(samples["bare await handler(ctx, args)"])
    backend = ArgsValidator("x", SCHEMA).fast_backend
    rows = [
        Row(name, statistics.median(v), p99(v), "µs", bare, GOALS.get(name, ""))
        for name, v in samples.items()
    ]
    print_rows(
        f"tool call benchmark ({ROUNDS} rounds x {CALLS_PER_ROUND} calls; validator: {backend})",
        rows,
    )
    return rows


if __name__ == "__main__":
    main()
