"""Load generator, monkey and the books they keep, against a real daemon's control socket.

- requests: `req N` to a caller instance (wait): the caller asks its worker through
  agents__request, so each one is an inter-agent request. Every one must end in a reply (the
  tool result: ok or a coded error) or a coded control error before its deadline; no answer
  by then is a hang.
- events: `evt N` to a worker instance without waiting: each accepted event id must later be
  processed (its input in the worker's conversation) or reported failed by the daemon.
  Other paths (tests/chaos/external.py: `goondan send`, the webhook) are extra `senders`,
  each with its own Tally.
- monkey: every `period` seconds, SIGKILL one random live agent process (pids from StatusQuery).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import zmq
import zmq.asyncio

from orchestrator.control.rundir import read_active
from protocol.codec import encode
from protocol.control import ControlReply, ControlRequest, SendText, StatusQuery, StatusResult
from protocol.endpoints import StateLayout
from tests.integration.harness import recv_final, with_token

REQUEST_TIMEOUT_MS = 15_000
GRACE = 5.0
"""A reply later than the request's own timeout plus this is a hang."""
DRAIN_S = 40.0
"""After the load stops, every in-flight call has ended (each is bounded below this)."""


@dataclass
class Tally:
    """One path of external events (control socket, `goondan send`, webhook)."""

    sent: int = 0
    answered: Counter[str] = field(default_factory=Counter)
    """Processed at once: "reply" (the worker's answer) or the coded error reported."""
    queued: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Accepted without a reply: event id -> (instance key, text), to find in the log."""
    hangs: list[str] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)
    """Neither accepted nor refused with a code (an uncoded failure, a wrong reply)."""

    @property
    def accepted(self) -> int:
        return sum(self.answered.values()) + len(self.queued)

    def figures(self, missing: Iterable[str]) -> dict[str, Any]:
        lost = len(set(missing) & self.queued.keys())
        errors = {k: v for k, v in self.answered.items() if k != "reply"}
        return {
            "sent": self.sent, "accepted": self.accepted, "processed": self.accepted - lost,
            "replies": self.answered["reply"], "errors": errors, "queued": len(self.queued),
            "lost": lost, "hangs": len(self.hangs), "faults": len(self.faults),
        }  # fmt: skip


@dataclass
class Books:
    requests: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    hangs: list[str] = field(default_factory=list)
    paths: dict[str, Tally] = field(default_factory=dict)
    kills: int = 0
    pids: set[int] = field(default_factory=set)
    seconds: float = 0.0

    def path(self, name: str) -> Tally:
        return self.paths.setdefault(name, Tally())

    @property
    def accepted(self) -> dict[str, tuple[str, str]]:
        """Every event accepted without a reply, on any path: each must be processed."""
        return {k: v for tally in self.paths.values() for k, v in tally.queued.items()}

    def summary(self, missing: Iterable[str] = ()) -> dict[str, Any]:
        missing = set(missing)
        return {
            "requests": self.requests, "outcomes": dict(self.outcomes), "hangs": len(self.hangs),
            "kills": self.kills, "seconds": round(self.seconds, 1),
            "events": {name: t.figures(missing) for name, t in sorted(self.paths.items())},
        }  # fmt: skip


class Control:
    """One DEALER per call (as the CLI does), so a lost reply can never block another call."""

    def __init__(self, swarm: str) -> None:
        info = read_active(StateLayout.from_env().run_paths(swarm).active_json)
        assert info is not None, "active.json is missing"
        self.endpoint = info.endpoints["control"]
        self.ctx = zmq.asyncio.Context()

    async def call(self, req: ControlRequest, limit: float) -> ControlReply:
        sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            sock.connect(self.endpoint)
            await sock.send(encode(with_token(req, self.endpoint)))
            async with asyncio.timeout(limit):
                return await recv_final(sock)
        finally:
            sock.close()

    async def status(self) -> StatusResult:
        reply = await self.call(StatusQuery(request_id="s"), 10)
        assert reply.ok, reply.error
        return msgspec.convert(reply.result, StatusResult)

    def close(self) -> None:
        self.ctx.term()


def classify(reply: ControlReply) -> str:
    """ok | tool:<code> (the inter-agent call failed, coded) | control:<code>."""
    if not reply.ok:
        assert reply.error is not None and reply.error.code, reply
        return f"control:{reply.error.code}"
    assert isinstance(reply.result, dict)
    text = str(reply.result.get("input", ""))
    try:
        result = json.loads(text)
    except ValueError:
        return "text"  # a plain reply (e.g. the caller's turn ran past a tool error)
    if result.get("status") == "ok":
        return "ok"
    code = (result.get("error") or {}).get("code")
    assert code, f"an uncoded tool error: {text[:300]}"
    return f"tool:{code}"


async def requester(control: Control, books: Books, keys: list[str], stop: asyncio.Event) -> None:
    while not stop.is_set():
        books.requests += 1
        n, key = books.requests, random.choice(keys)
        req = SendText(
            request_id=f"r{n}", text=f"req {n}", agent="caller", instance_key=key,
            timeout_ms=REQUEST_TIMEOUT_MS,
        )  # fmt: skip
        try:
            reply = await control.call(req, REQUEST_TIMEOUT_MS / 1000 + GRACE)
        except TimeoutError:
            books.hangs.append(f"req {n} to caller@{key}")
            continue
        books.outcomes[classify(reply)] += 1


async def emitter(control: Control, tally: Tally, keys: list[str], stop: asyncio.Event) -> None:
    while not stop.is_set():
        tally.sent += 1
        key, text = random.choice(keys), f"evt {tally.sent}"
        req = SendText(request_id=f"e{tally.sent}", text=text, agent="worker", instance_key=key,
                       wait=False)  # fmt: skip
        try:
            reply = await control.call(req, 10)
        except TimeoutError:
            tally.hangs.append(f"{text} (not even accepted)")
            continue
        if reply.ok:
            tally.queued[str(reply.result)] = (key, text)
        elif reply.error is not None and reply.error.code:
            tally.answered[reply.error.code] += 1  # refused with a code: reported failed
        else:
            tally.faults.append(f"{text}: {reply}")
        await asyncio.sleep(0.05)  # pacing: events are cheap to send, turns are not


async def monkey(control: Control, books: Books, period: float, stop: asyncio.Event) -> None:
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), period)
        if stop.is_set():
            return
        status = await control.status()
        live = [p.pid for p in status.processes if p.kind == "agent" and p.pid]
        books.pids.update(live)
        if live:
            with contextlib.suppress(ProcessLookupError):
                os.kill(random.choice(live), signal.SIGKILL)
                books.kills += 1


Sender = Callable[[Books, asyncio.Event], Awaitable[None]]
"""An extra load source: runs until the event is set and bounds each of its own calls."""


async def run_load(
    control: Control,
    keys: list[str],
    seconds: float,
    period: float,
    clients: int = 4,
    senders: Iterable[Sender] = (),
) -> Books:
    books = Books()
    stop = asyncio.Event()
    tasks = [asyncio.ensure_future(requester(control, books, keys, stop)) for _ in range(clients)]
    tasks.append(asyncio.ensure_future(emitter(control, books.path("control"), keys, stop)))
    tasks.append(asyncio.ensure_future(monkey(control, books, period, stop)))
    tasks.extend(asyncio.ensure_future(sender(books, stop)) for sender in senders)
    started = time.monotonic()
    try:
        await asyncio.wait(tasks, timeout=seconds, return_when=asyncio.FIRST_EXCEPTION)
        stop.set()
        # in-flight calls finish (or hang) within their own deadline
        await asyncio.wait_for(asyncio.gather(*tasks), DRAIN_S)
    finally:  # cancelled (the orchestrator-kill test): close every socket before ctx.term()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    books.seconds = time.monotonic() - started
    return books
