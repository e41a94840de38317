"""The agent child's turn loop and the drain: an idle loop parked on its queue wakes at once;
a busy one finishes its turn and hands back the events it never started."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import zmq
import zmq.asyncio

from agent_process.child import Child
from agent_process.link import connect
from agent_process.middleware_contexts import TurnResult
from agent_process.turn import Resumed
from protocol.events import AgentEvent, Source, SourceKind, new_event
from protocol.ids import parse_process_id
from protocol.launch import ChildLaunch, LaunchSettings
from protocol.messages import TurnOutcome

TIMEOUT = 10


@pytest.fixture
async def endpoint(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    ctx = zmq.asyncio.Context()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.bind(f"ipc://{tmp_path_factory.mktemp('c')}/agents.sock")
    try:
        yield router.getsockopt_string(zmq.LAST_ENDPOINT)
    finally:
        router.close()
        ctx.term()


def _opts(endpoint: str, tmp_path: Path) -> ChildLaunch:
    settings = LaunchSettings(
        endpoint=endpoint, swarm="s", bundle=str(tmp_path / "goondan.yaml"),
        state_root=str(tmp_path), heartbeat_interval=60.0,
    )  # fmt: skip
    return ChildLaunch(process=parse_process_id("agent:a:k:1"), settings=settings)


def _event(text: str) -> AgentEvent:
    return new_event(type="user.input", input=text, instance_key="k",
                     source=Source(kind=SourceKind.CLI, name="cli"))  # fmt: skip


class HeldRunner:
    """Runs each turn until the test releases it."""

    def __init__(self) -> None:
        self.started: asyncio.Queue[str] = asyncio.Queue()
        self.release = asyncio.Event()
        self.tool_names: list[str] = []

    async def run_turn(self, event: AgentEvent, resumed: Resumed | None = None) -> TurnResult:
        self.started.put_nowait(event.id)
        await self.release.wait()
        return TurnResult(turn_id="t", event_id=event.id, outcome=TurnOutcome.COMPLETED)

    async def close(self) -> None:
        return None


async def test_an_idle_loop_parked_on_its_queue_ends_at_the_drain(
    endpoint: str, tmp_path: Path
) -> None:
    async with asyncio.timeout(TIMEOUT):
        async with connect(_opts(endpoint, tmp_path)) as link:
            child = Child(_opts(endpoint, tmp_path), link)
            child.runner = HeldRunner()
            loop = asyncio.ensure_future(child._turn_loop())
            await asyncio.sleep(0)  # one loop turn: it parks on the empty queue
            assert not loop.done()
            link.drain()
            await loop  # no turn ran, nothing is left to hand back
    assert child._take_queue() == []


async def test_a_busy_loop_finishes_its_turn_and_hands_back_the_rest(
    endpoint: str, tmp_path: Path
) -> None:
    first, second = _event("one"), _event("two")
    runner = HeldRunner()
    async with asyncio.timeout(TIMEOUT):
        async with connect(_opts(endpoint, tmp_path)) as link:
            child = Child(_opts(endpoint, tmp_path), link)
            child.runner = runner
            child.queue.put_nowait(first)
            child.queue.put_nowait(second)
            loop = asyncio.ensure_future(child._turn_loop())
            assert await runner.started.get() == first.id
            link.drain()  # during the turn
            runner.release.set()
            await loop
    assert runner.started.empty()  # the second event never started ...
    assert child._take_queue() == [second.id]  # ... and goes back with the ack
