"""The workload: one sender per instance key, each sending numbered texts one after another
through the nodes in turn (around the ones the nemesis stopped or killed). About a third of a
key's texts start with `req`: `caller` then asks its key's `worker` instance through
agents__request before it answers (tests/cluster/bundle), and for most keys that instance's
partition is owned by another node (`crossing`), so the request crosses nodes. A send is
acknowledged when it is answered (a request: with the worker's answer); a coded error or a
timeout leaves it unacknowledged (the checker then does not require it, only that it is not
duplicated)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field

from orchestrator.cluster.names import partition_of, plan
from protocol.control import ControlReply
from tests.faults.nemesis import World
from tests.integration.harness import Daemon

SEND_LIMIT = 30.0
REQUEST_SHARE = 1 / 3
PARTITIONS = 12
"""tests/cluster/bundle's `partitions`."""


@dataclass
class Outcome:
    key: str
    text: str
    sent: float
    done: float
    ok: bool
    code: str | None = None
    answer: str | None = None
    """A failed send's answer, when it had one (the trace's clue to why it failed)."""

    @property
    def request(self) -> bool:
        """Whether `caller` asked `worker` for this one (agents__request)."""
        return self.text.startswith("req ")


def crossing(keys: list[str], nodes: list[str]) -> list[str]:
    """The keys whose `caller` and `worker` instances the settled cluster places on different
    nodes (the nodes' own rendezvous plan): their requests cross nodes."""
    owners = plan(PARTITIONS, nodes)
    return [k for k in keys if owners[partition_of("caller", k, PARTITIONS)]
            != owners[partition_of("worker", k, PARTITIONS)]]  # fmt: skip


def answered(text: str, answer: str) -> bool:
    """Whether `answer` is `caller`'s to `text`: its echo, or for a request the tool result
    carrying `worker`'s echo."""
    if text.startswith("req "):
        return f'"response":"worker: {text}"' in answer
    return answer == f"caller: {text}"


async def until_dead(node: Daemon, send: Awaitable[ControlReply]) -> ControlReply | None:
    """The send's reply, or None as soon as `node`'s process ends (a send on a killed node
    would otherwise wait its whole SEND_LIMIT, which measured the workload, not goondan)."""
    sending = asyncio.ensure_future(send)
    dying = asyncio.ensure_future(node.proc.wait())
    try:
        await asyncio.wait({sending, dying}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        dying.cancel()
        if not sending.done():
            sending.cancel()
    if not sending.cancelled() and sending.done():
        return sending.result()
    with contextlib.suppress(asyncio.CancelledError):
        await sending
    return None


@dataclass
class Workload:
    world: World
    keys: list[str]
    outcomes: list[Outcome] = field(default_factory=list)
    stopping: asyncio.Event = field(default_factory=asyncio.Event)

    async def _one(self, key: str, n: int, text: str) -> None:
        live = [i for i in range(len(self.world.nodes)) if i not in self.world.down] or [0]
        node = self.world.nodes[live[n % len(live)]]
        start = time.monotonic()
        code: str | None = None
        answer: str | None = None
        try:
            async with asyncio.timeout(SEND_LIMIT):
                reply = await until_dead(node, node.send(text, key=key))
            if reply is None:  # its node died under it: a client would retry elsewhere now
                ok, code = False, "node died"
            else:
                answer = str((reply.result or {}).get("input", ""))
                ok = reply.ok and answered(text, answer)
                if not reply.ok:
                    code = str(reply.error.code if reply.error else "?")
        except (TimeoutError, OSError) as exc:
            ok, code = False, type(exc).__name__
        done = time.monotonic()
        self.outcomes.append(Outcome(key, text, start, done, ok, code, None if ok else answer))

    async def _sender(self, key: str) -> None:
        rng = random.Random(key)  # the same texts every run: a failure can be replayed
        n = 0
        while not self.stopping.is_set():
            text = f"{'req ' if rng.random() < REQUEST_SHARE else ''}w{n} {key}"
            await self._one(key, n, text)
            n += 1

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            for key in self.keys:
                group.create_task(self._sender(key))
