"""Run, in the fork server, a child's turn path on a conversation that never reaches a disk.

An agent that has served one event runs code an idle one never did: the turn and step engine,
the pipelines, the scripted model, message and runtime-event records and their JSON
encoding, the reply and status frames. Running it here first (see `agent_process.warm` for
why that keeps a child's memory shared) is the same engine (`TurnEngine.run`) with the real
store and event bus, whose file descriptor is /dev/null (opened and closed here, so no child
inherits it): every record is encoded and written to nowhere. The turn-end fold is not run
(it would create the conversation's base file); nothing is created on disk.

No event loop: the turn's coroutine is driven with `send(None)`; it never suspends (the
scripted model below has no delay, there are no tools and no middleware). It runs in a copy
of the context, so the log context vars the turn binds do not stay in the fork server.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from agent_process.catalog import CatalogBuilder
from agent_process.contexts import TurnResult
from agent_process.inbox import Inbox
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
SCRIPT = ScriptedOptions(
    script=[ScriptRule(match="(?i)^bye\\b", reply="bye"), ScriptRule(reply="warm: {input}")]
)
"""A script without delay or tool calls: every step completes at once."""


def _engine(
    agent: str, instance_key: str, inbox_dir: Path, agents: AgentsRuntime, sink: int
) -> TurnEngine:
    """The real classes (a child's code is specialized for them), with the store's and the
    bus's file descriptor on /dev/null: every record is encoded and written to nowhere."""
    registry = ToolRegistry.build([])
    pipelines = Pipelines()
    bus = EventBus(None, agent=agent, instance_key=instance_key)
    store = ConversationStore(inbox_dir.parent / "messages")
    bus._fd = store._fd = sink
    store._appended = []
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


def _turn_end(store: ConversationStore, bus: EventBus) -> None:
    """The real one folds the store (its base file does not exist here: not run) and
    flushes the bus."""
    bus.flush()
    store._pending_events = 0


def turn(me: str, source: Source, inbox_dir: Path, agents: AgentsRuntime) -> TurnResult | None:
    """One turn of `source`'s agent on a fresh stand-in conversation, then its reply and
    status frames; None if it would have suspended (it never does)."""
    assert source.instance_key is not None
    caller = Source(kind=SourceKind.CONNECTOR, name="warm", instance_key=source.instance_key)
    event = new_event(
        type="input", input="hello", instance_key=source.instance_key, source=caller,
        reply_to=ReplyTo(target=ORCHESTRATOR, correlation_id="warm"),
    )  # fmt: skip
    sink = os.open(os.devnull, os.O_WRONLY)  # closed before any fork: no child inherits it
    try:
        engine = _engine(source.name, source.instance_key, inbox_dir, agents, sink)
        result = contextvars.copy_context().run(drive, engine.run(event))
    finally:
        os.close(sink)
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
