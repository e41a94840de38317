"""A real Router on an ipc socket in a tmp dir, serving one idle process entry `a@k` gen 1;
its lifecycle is a `FakeLifecycle` (no supervisor)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import zmq
import zmq.asyncio

from orchestrator.routing.router import Router
from orchestrator.supervision.states import ProcessStatus
from orchestrator.supervision.table import ProcessEntry, ProcessTable
from protocol.ids import agent_address
from tests.unit.orchestrator.fakes import FakeLifecycle, build_router


@dataclass
class Routed:
    router: Router
    entry: ProcessEntry
    endpoint: str
    ctx: zmq.asyncio.Context
    lifecycle: FakeLifecycle

    def peer(self) -> zmq.asyncio.Socket:
        """A DEALER speaking as the entry's current process (closed by the fixture)."""
        sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.IDENTITY, self.entry.routing_id)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(self.endpoint)
        return sock


@pytest.fixture
async def routed(tmp_path: Path) -> AsyncIterator[Routed]:
    table = ProcessTable()
    entry = table.entry(agent_address("a", "k"))
    entry.generation = 1
    entry.status = ProcessStatus.IDLE
    endpoint = f"ipc://{tmp_path}/agents.sock"
    ctx = zmq.asyncio.Context()
    lifecycle = FakeLifecycle()
    router = build_router(ctx, endpoint, table, lifecycle)
    task = asyncio.ensure_future(router.run())
    try:
        yield Routed(router, entry, endpoint, ctx, lifecycle)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        router.close()
        ctx.destroy(linger=0)
