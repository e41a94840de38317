"""Runtime events: buffered recording flushed at durability points, and subscribers."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

from agent_process.telemetry import FLUSH_EVERY, EventBus, RuntimeEvent


def ev(kind: str) -> RuntimeEvent:
    return RuntimeEvent(type=kind, at=time.time(), agent="a", instance_key="k")


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_events_are_buffered_until_a_flush_or_a_full_buffer(tmp_path: Path) -> None:
    path = tmp_path / "runtime-events.jsonl"
    bus = EventBus(path, agent="a", instance_key="k")
    bus.open()
    bus.emit(ev("tool.called"))
    assert lines(path) == []
    bus.flush()
    assert [e["type"] for e in lines(path)] == ["tool.called"]
    for _ in range(FLUSH_EVERY):
        bus.emit(ev("step.started"))
    assert len(lines(path)) == 1 + FLUSH_EVERY  # the full buffer flushed itself
    bus.close()


async def test_subscribers_get_matching_events_and_their_failures_stay_contained(
    tmp_path: Path,
) -> None:
    bus = EventBus(None, agent="a", instance_key="k")
    assert not bus.active
    got: dict[str, list[str]] = {"exact": [], "prefix": [], "all": [], "async": []}
    done = asyncio.Event()

    async def later(e: dict[str, Any]) -> None:
        got["async"].append(e["type"])
        done.set()

    def broken(e: dict[str, Any]) -> None:
        raise RuntimeError("subscriber bug")

    async def broken_async(e: dict[str, Any]) -> None:
        raise RuntimeError("async subscriber bug")

    bus.on("tool.completed", lambda e: got["exact"].append(e["type"]), owner="x")
    bus.on("tool.*", lambda e: got["prefix"].append(e["type"]), owner="x")
    bus.on("*", lambda e: got["all"].append(e["type"]), owner="x")
    bus.on("turn.started", later, owner="x")
    bus.on("tool.*", broken, owner="bad")
    bus.on("tool.*", broken_async, owner="bad")
    assert bus.active
    for kind in ("turn.started", "tool.called", "tool.completed", "toolbox.x"):
        bus.emit(ev(kind))
    async with asyncio.timeout(5):
        await done.wait()
        await bus.drain()
    assert got == {
        "exact": ["tool.completed"],
        "prefix": ["tool.called", "tool.completed"],
        "all": ["turn.started", "tool.called", "tool.completed", "toolbox.x"],
        "async": ["turn.started"],
    }


def test_a_bus_on_a_sink_writes_there_and_leaves_the_sink_open(tmp_path: Path) -> None:
    path, sink_path = tmp_path / "events" / "runtime-events.jsonl", tmp_path / "sink"
    sink = os.open(sink_path, os.O_WRONLY | os.O_CREAT)
    try:
        bus = EventBus(path, agent="a", instance_key="k", sink=sink)
        bus.open()
        bus.emit(ev("turn.started"))
        bus.close()
        os.fstat(sink)  # still open: the caller's to close
    finally:
        os.close(sink)
    assert not path.parent.exists()
    assert [e["type"] for e in lines(sink_path)] == ["turn.started"]
