"""The router answers each child's heartbeat (no broadcast to every child at once).

With 1,000 children a once-a-second broadcast woke all of them in the same instant (hundreds
runnable at once, the routing p99 at that size); children beat on their own timers, started
when each one started, and the answer is what keeps their orchestrator-loss deadline away.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import zmq.asyncio

from orchestrator.supervision.table import ProcessEntry
from protocol.codec import decode_message, encode
from protocol.ids import ORCHESTRATOR
from protocol.messages import Heartbeat, HeartbeatPayload
from tests.unit.orchestrator.conftest import Routed


@pytest.fixture
def child(routed: Routed) -> tuple[ProcessEntry, zmq.asyncio.Socket]:
    return routed.entry, routed.peer()


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
