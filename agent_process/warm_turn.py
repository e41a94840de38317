"""Run, in the fork server, a child's turn path on a conversation that never reaches a disk.

An agent that has served one event runs code an idle one never did: the turn and step engine,
the pipelines, the scripted model, message and runtime-event records and their JSON
encoding, the reply and status frames. Running it here first (see `agent_process.warm` for
why that keeps a child's memory shared) is the same engine (`TurnEngine.run`) on stand-ins of
the store and the event bus that encode every record like the real ones but write nothing.

No event loop: the turn's coroutine is driven with `send(None)`; it never suspends (the
scripted model below has no delay, there are no tools and no middleware). It runs in a copy
of the context, so the log context vars the turn binds do not stay in the fork server.
"""

from __future__ import annotations

import contextvars
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from agent_process.catalog import CatalogBuilder
from agent_process.contexts import TurnResult
from agent_process.inbox import Inbox
from agent_process.messages import MessageEvent, apply_event
from agent_process.models.scripted import ScriptedModel
from agent_process.pipeline import Pipelines
from agent_process.registry import ToolRegistry
from agent_process.store import ConversationStore
from agent_process.telemetry import EventBus
from agent_process.toolcall import ToolCallRunner
from agent_process.turn import TurnDeps, TurnEngine
from bundles.kinds import ScriptedOptions, ScriptRule
from bundles.sdk import AgentsRuntime
from protocol.codec import encode
from protocol.events import AgentEvent, ReplyTo, Source, SourceKind, new_event, response_to
from protocol.ids import ORCHESTRATOR
from protocol.messages import ChildState, Event, Status, StatusPayload

T = TypeVar("T")
_encoder = msgspec.json.Encoder()
_NO_FD = -1
"""Stands for the open file of the real store and bus: present, never written to."""
SCRIPT = ScriptedOptions(
    script=[ScriptRule(match="(?i)^bye\\b", reply="bye"), ScriptRule(reply="warm: {input}")]
)
"""A script without delay or tool calls: every step completes at once."""


class _Store(ConversationStore):
    """The conversation store's records and folds, encoded but not written."""

    def __init__(self, messages_dir: Path) -> None:
        super().__init__(messages_dir)
        self._fd = _NO_FD
        self._appended = []

    def _record(self, event: MessageEvent) -> None:
        _encoder.encode(event)  # the line the real store appends to events.jsonl
        apply_event(self._messages, event)
        self._pending_events += 1

    def fold(self) -> None:
        b"".join(_encoder.encode(m) + b"\n" for m in self._messages)  # base.jsonl's lines
        self._pending_events = 0


class _Bus(EventBus):
    """The event bus's encoding of runtime events (and their log span), never flushed."""

    def __init__(self, agent: str, instance_key: str) -> None:
        super().__init__(None, agent=agent, instance_key=instance_key)
        self._fd = _NO_FD

    def flush(self) -> None:
        self._buffer.clear()


def _engine(agent: str, instance_key: str, inbox_dir: Path, agents: AgentsRuntime) -> TurnEngine:
    registry = ToolRegistry.build([])
    pipelines = Pipelines()
    bus = _Bus(agent, instance_key)
    store = _Store(inbox_dir.parent / "messages")
    tool_calls = ToolCallRunner(
        registry=registry, pipelines=pipelines, bus=bus, workdir=inbox_dir.parent,
        logger=None, runtime=agents, secret_values=frozenset(),
    )  # fmt: skip
    deps = TurnDeps(
        agent_name=agent, instance_key=instance_key,
        model=ScriptedModel("warm", SCRIPT), model_params={}, system_prompt="warm",
        max_steps=4, catalog=CatalogBuilder(registry), pipelines=pipelines,
        store=store, bus=bus, tool_calls=tool_calls,
        at_turn_end=lambda: _turn_end(store, bus), inbox=Inbox(inbox_dir), agents=agents,
    )  # fmt: skip
    return TurnEngine(deps)


def _turn_end(store: _Store, bus: _Bus) -> None:
    store.fold()
    bus.flush()


def turn(me: str, source: Source, inbox_dir: Path, agents: AgentsRuntime) -> TurnResult | None:
    """One turn of `source`'s agent on a fresh stand-in conversation, then its reply and
    status frames; None if it would have suspended (it never does)."""
    assert source.instance_key is not None
    engine = _engine(source.name, source.instance_key, inbox_dir, agents)
    caller = Source(kind=SourceKind.CONNECTOR, name="warm", instance_key=source.instance_key)
    event = new_event(
        type="input", input="hello", instance_key=source.instance_key, source=caller,
        reply_to=ReplyTo(target=ORCHESTRATOR, correlation_id="warm"),
    )  # fmt: skip
    result = contextvars.copy_context().run(drive, engine.run(event))
    if result is not None:
        _frames(me, source, event, result)
    return result


def _frames(me: str, source: Source, event: AgentEvent, result: TurnResult) -> None:
    """What the child sends around a turn: processing, the reply, idle."""
    for state, outcome in ((ChildState.PROCESSING, None), (ChildState.IDLE, result.outcome)):
        payload = StatusPayload(state=state, event_id=event.id, last_turn=outcome)
        encode(Status(from_=me, to=ORCHESTRATOR, payload=payload))
    assert event.reply_to is not None
    reply = response_to(event, source=source, text=result.text, error=result.error)
    encode(Event(from_=me, to=event.reply_to.target, payload=reply))


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
