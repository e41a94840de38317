"""The router answers each child's heartbeat (no broadcast to every child at once).

With 1,000 children a once-a-second broadcast woke all of them in the same instant (hundreds
runnable at once, the routing p99 at that size); children beat on their own timers, started
when each one started, and the answer is what keeps their orchestrator-loss deadline away.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest
import zmq
import zmq.asyncio

from orchestrator.router import Router
from orchestrator.states import ProcessStatus
from orchestrator.table import ProcessEntry, ProcessTable
from protocol.codec import decode_message, encode
from protocol.ids import ORCHESTRATOR, agent_address
from protocol.messages import Heartbeat, HeartbeatPayload


@pytest.fixture
async def child(tmp_path: Path) -> AsyncIterator[tuple[ProcessEntry, zmq.asyncio.Socket]]:
    table = ProcessTable()
    entry = table.entry(agent_address("a", "k"))
    entry.generation = 1
    entry.status = ProcessStatus.IDLE
    endpoint = f"ipc://{tmp_path}/agents.sock"
    ctx = zmq.asyncio.Context()
    router = Router(ctx, endpoint, table)
    router.lifecycle = cast(Any, object())  # a heartbeat needs no lifecycle hook
    peer = ctx.socket(zmq.DEALER)
    peer.setsockopt(zmq.IDENTITY, entry.routing_id)
    peer.setsockopt(zmq.LINGER, 0)
    peer.connect(endpoint)
    task = asyncio.ensure_future(router.run())
    try:
        yield entry, peer
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        peer.close()
        router.close()
        ctx.term()


async def test_each_heartbeat_is_answered_with_its_own_sequence_number(
    child: tuple[ProcessEntry, zmq.asyncio.Socket],
) -> None:
    entry, peer = child
    async with asyncio.timeout(5):
        for seq in (1, 2, 3):
            beat = HeartbeatPayload(seq=seq, sent_at=time.time())
            await peer.send(encode(Heartbeat(from_=entry.id_text, to=ORCHESTRATOR, payload=beat)))
            answer = decode_message(await peer.recv())
            assert isinstance(answer, Heartbeat)
            assert (answer.from_, answer.to, answer.payload.seq) == (
                ORCHESTRATOR,
                entry.id_text,
                seq,
            )
