"""Rehearse, in the fork server, an agent child's start and turn on the real code.

The specializing interpreter rewrites a function's bytecode in place as it runs: a child doing
that on code it shares with the fork server writes to those pages, and each page written
becomes its private copy. Run here first, the code a child runs at start and in its first turn
is already rewritten, and stays shared.

A rehearsal is the child's own path, from the launch the spawner encodes to the reply and
status frames of a turn: `parse_launch`, `Child` and its `Link` (hello, ready), the runtime's
assembly (`create_runtime`: resolve, registry, model, store, event bus, engine), then an event
frame through `dispatch` and `run_one` (pipelines, model, records, reply). What it must not do
in the fork server is injected: the link's socket drops every frame, the store and the event
bus write to /dev/null (opened and closed here: no child inherits it) and create nothing on
disk, the state root is one that does not exist, and the turn does not race the drain (that
needs an event loop). The agents are stand-ins (`standin`): no user code, no network.

No event loop, thread or socket is made: each coroutine is driven with `send(None)` and never
suspends. Each run has a copy of the context, so the log context it binds does not stay.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
from collections.abc import Awaitable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec
import structlog

from agent_process.child import Child, RunnerFactory, TurnReport, create_runtime, parse_launch
from agent_process.link import Link
from bundles.kinds import Kind
from bundles.model import Bundle
from protocol.codec import decode_message, encode
from protocol.events import ReplyTo, Source, SourceKind, new_event
from protocol.ids import ORCHESTRATOR, ProcessId, ProcessKind
from protocol.launch import ChildLaunch, LaunchSettings, encode_launch
from protocol.messages import Event, Ready

T = TypeVar("T")
RUNS = 64
"""Starts, spread over the bundle's agents: enough for 3.11 to quicken and specialize (it
quickens after 8 calls and specializes an instruction within its first runs after that)."""
TURNS = 16
"""The first starts also run a turn."""
INSTANCE_KEY = "rehearsal"
STATE_DIR = "forkprep-rehearsal"
"""Under the state root, never created: what the child only reads (pending calls, inbox,
spawn.json) is absent, so a real instance's files are never even looked at."""


@dataclass(frozen=True, slots=True)
class Rehearsed:
    starts: int
    """Stand-ins that reached `ready`."""
    turns: int
    """Turns that sent their reply."""


class NullSocket:
    """The link's socket: every frame is dropped, after the frame types of this child's run
    are noted (what `Rehearsed` counts)."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def send(self, data: bytes) -> None:
        self.sent.append(type(decode_message(data)).__name__)

    def send_nowait(self, data: bytes) -> bool:
        self.sent.append(type(decode_message(data)).__name__)
        return True

    async def recv(self) -> bytes:
        raise RuntimeError("a rehearsal never serves its link")


def rehearse(stand_in: Bundle, launch: LaunchSettings, *, turns: bool) -> Rehearsed:
    """RUNS starts of the stand-in agents (`standin.bundle`), TURNS turns if `turns`."""
    agents = [res.name for res in stand_in.of_kind(Kind.AGENT, user_only=True)]
    if not agents:
        return Rehearsed(0, 0)
    settings = msgspec.structs.replace(
        launch, state_root=os.path.join(launch.state_root, STATE_DIR)
    )
    sink = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    starts = replies = 0
    try:
        factory: RunnerFactory = functools.partial(create_runtime, bundle=stand_in, sink=sink)
        for i in range(RUNS):
            pid = ProcessId(
                kind=ProcessKind.AGENT, name=agents[i % len(agents)],
                instance_key=INSTANCE_KEY, generation=1,
            )  # fmt: skip
            text = encode_launch(ChildLaunch(process=pid, settings=settings))
            sent = contextvars.copy_context().run(_run, text, factory, turns and i < TURNS)
            starts += Ready.__name__ in sent
            replies += Event.__name__ in sent
    finally:
        os.close(sink)
    return Rehearsed(starts, replies)


def _run(text: str, factory: RunnerFactory, with_turn: bool) -> list[str]:
    """One child, as `child.main` and `amain` run it; the frames it sent."""
    launch = parse_launch([text])
    assert isinstance(launch, ChildLaunch)
    pid = launch.process
    structlog.contextvars.bind_contextvars(
        process=str(pid), agent=pid.name, instanceKey=pid.instance_key, pid=os.getpid()
    )
    sock = NullSocket()
    child = Child(launch, Link(launch, sock), park=_unraced)
    if drive(child.start(factory)) and with_turn:
        source = Source(kind=SourceKind.CONNECTOR, name="rehearsal", instance_key=pid.instance_key)
        event = new_event(
            type="input", input="hello", instance_key=pid.instance_key, source=source,
            reply_to=ReplyTo(target=ORCHESTRATOR, correlation_id="rehearsal"),
        )  # fmt: skip
        frame = encode(Event(from_=ORCHESTRATOR, to=child.me, payload=event))
        child.dispatch(decode_message(frame))  # as the link's receive loop does
        taken = child.queue.get_nowait()  # as the turn loop does
        if taken is not None:
            drive(child.run_one(taken))
    return sock.sent


async def _unraced(
    turn: Awaitable[TurnReport], draining: asyncio.Event, parked: asyncio.Event
) -> TurnReport | None:
    """The turn alone: racing it against the drain takes an event loop."""
    return await turn


def drive(coro: Coroutine[Any, Any, T]) -> T | None:
    """Run a coroutine that never suspends to its end, without a loop; None if it did
    suspend (it is closed then: nothing here could resume it)."""
    try:
        coro.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    coro.close()
    return None
