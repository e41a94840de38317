"""The workload: one sender per instance key, each sending numbered texts one after another
through the nodes in turn (around the ones the nemesis stopped or killed). A send is
acknowledged when it is answered; a coded error or a timeout leaves it unacknowledged (the
checker then does not require it, only that it is not duplicated)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from tests.faults.nemesis import World

SEND_LIMIT = 30.0


@dataclass
class Outcome:
    key: str
    text: str
    sent: float
    done: float
    ok: bool
    code: str | None = None


@dataclass
class Workload:
    world: World
    keys: list[str]
    outcomes: list[Outcome] = field(default_factory=list)
    stopping: asyncio.Event = field(default_factory=asyncio.Event)

    async def _one(self, key: str, n: int) -> None:
        live = [i for i in range(len(self.world.nodes)) if i not in self.world.down] or [0]
        node = self.world.nodes[live[n % len(live)]]
        text = f"w{n} {key}"
        start = time.monotonic()
        try:
            async with asyncio.timeout(SEND_LIMIT):
                reply = await node.send(text, key=key)
            ok = reply.ok and reply.result["input"] == f"caller: {text}"
            code = None if reply.ok else str(reply.error.code if reply.error else "?")
        except (TimeoutError, OSError) as exc:
            ok, code = False, type(exc).__name__
        self.outcomes.append(Outcome(key, text, start, time.monotonic(), ok, code))

    async def _sender(self, key: str) -> None:
        n = 0
        while not self.stopping.is_set():
            await self._one(key, n)
            n += 1

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            for key in self.keys:
                group.create_task(self._sender(key))
