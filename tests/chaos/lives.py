"""The orchestrator's successive lives: SIGKILL the daemon, wait until every process of its run
is gone, start `goondan run` again on the same state root (and the same webhook port).

A client call belongs to the life it was sent to. `Life.dead` is set the moment that life is
SIGKILLed, so `Lives.within` tells a reply that did not come because its daemon died (`CUT`:
the outcome is unknown, the client retries with its idempotency key or re-attaches by event
id) from one that did not come while its daemon lived (`HANG`, a failure).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import random
import signal
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import TypeVar

from protocol.endpoints import StateLayout
from tests.chaos import checks
from tests.chaos.test_chaos import chaos_env
from tests.integration.conftest import StartDaemon
from tests.integration.harness import REPO, Daemon

BUNDLE = REPO / "tests" / "chaos" / "bundle"
SWARM = "chaos"
HOOK = "connector:hook:webhook"
UP_LIMIT_S = 60.0
"""A restart that takes longer than this (start, connector listening) is a failure."""
GONE_LIMIT_S = 10.0
"""The processes of a killed life that are still there after this are orphans."""
T = TypeVar("T")


class Lost(enum.Enum):
    CUT = "cut"
    """The call's daemon died before it answered: its outcome is unknown."""
    HANG = "hang"
    """No answer within the call's bound while its daemon lived."""


CUT, HANG = Lost.CUT, Lost.HANG


@dataclass
class Life:
    index: int
    daemon: Daemon
    dead: asyncio.Event = field(default_factory=asyncio.Event)
    hook: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once this life's webhook connector listens."""


@dataclass
class Lives:
    start_daemon: StartDaemon
    port: int
    all: list[Life] = field(default_factory=list)
    up: asyncio.Event = field(default_factory=asyncio.Event)
    orphans: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    """Restarts that did not come up (the daemon exited, or was not up in time)."""
    _watchers: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def current(self) -> Life:
        return self.all[-1]

    @property
    def kills(self) -> int:
        return sum(1 for life in self.all if life.dead.is_set())

    async def begin(self) -> Life:
        """Start a daemon on the state root (the first one, or the next after a kill)."""
        env = chaos_env(self.port)  # `answers` (POST /rpc) on any port: nobody answers here
        daemon = await self.start_daemon(BUNDLE, swarm=SWARM, env=env)
        life = Life(len(self.all) + 1, daemon)
        self.all.append(life)
        watcher = asyncio.ensure_future(self._watch_hook(life))
        self._watchers.add(watcher)
        watcher.add_done_callback(self._watchers.discard)
        self.up.set()
        return life

    async def _watch_hook(self, life: Life) -> None:
        with contextlib.suppress(AssertionError):  # the life ended first
            await life.daemon.wait_for("transition", process=f"{HOOK}:1", target="idle")
            life.hook.set()

    async def alive(self) -> Life:
        """The current life, once there is one (bounded)."""
        async with asyncio.timeout(UP_LIMIT_S):
            await self.up.wait()
        return self.current

    async def listening(self) -> Life:
        """The current life once its webhook listens (bounded; a kill meanwhile moves on to
        the next life)."""
        while True:
            life = await self.alive()
            listens = await self.within(life, life.hook.wait(), UP_LIMIT_S)
            if listens is True:
                return life
            if listens is HANG:
                raise TimeoutError(f"life {life.index}: the webhook does not listen")

    async def within(self, life: Life, call: Awaitable[T], limit: float) -> T | Lost:
        """`call`'s result, or CUT when `life` dies first, or HANG after `limit` seconds (a
        TimeoutError of the call itself counts the same way)."""
        task = asyncio.ensure_future(call)
        dead = asyncio.ensure_future(life.dead.wait())
        try:
            done, _ = await asyncio.wait({task, dead}, timeout=limit,
                                         return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
        finally:
            for aw in (task, dead):
                aw.cancel()
            await asyncio.gather(task, dead, return_exceptions=True)
        if task in done and not isinstance(task.exception(), TimeoutError):
            return task.result()
        return CUT if life.dead.is_set() else HANG

    async def kill_and_restart(self) -> None:
        life = self.current
        procs = life.daemon.descendants()
        self.up.clear()
        life.daemon.signal(signal.SIGKILL)
        life.dead.set()  # in the same turn of the loop: no reply of this life is read after
        await life.daemon.wait()
        root = StateLayout.from_env().root
        left = await checks.wait_gone(procs, root, GONE_LIMIT_S)
        self.orphans.extend(f"life {life.index}: {p}" for p in left)
        try:
            await self.begin()
        except RuntimeError as exc:  # the daemon exited before it said `started`
            self.failures.append(f"life {life.index + 1}: {exc}")
            raise

    async def killer(self, stop: asyncio.Event, period: float) -> None:
        """Until `stop`: SIGKILL the orchestrator after a random part of 2 * `period` of its
        life (some while it still recovers, some under full load), then start it again."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), random.uniform(0.1, 2 * period))
            if stop.is_set():
                return
            await self.kill_and_restart()

    def lines(self, event: str) -> list[dict[str, object]]:
        """Log lines `event` of every life."""
        return [line for life in self.all for line in life.daemon.find(event)]

    async def close(self) -> None:
        for task in list(self._watchers):
            task.cancel()
        await asyncio.gather(*self._watchers, return_exceptions=True)
