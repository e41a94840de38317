"""Every frame between the orchestrator and its children: one closed tagged union on `type`.

Each message carries `from` (wire name; `from_` in Python), `to` and a typed `payload`.
Addresses are `orchestrator`, an address `<kind>:<name>:<instanceKey>` or a process id
`<kind>:<name>:<instanceKey>:<generation>` (see protocol.ids).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import msgspec

from protocol.errors import ErrorInfo
from protocol.events import AgentEvent
from protocol.jsontypes import JsonObject
from protocol.stream import StreamDelta

PROTOCOL_VERSION = 2
"""2: the `delta` frame. A child says its version in `hello`; the orchestrator sends `delta`
frames only to a child of STREAM_PROTOCOL or later, and serves any version it still reads."""
MIN_PROTOCOL_VERSION = 1
STREAM_PROTOCOL = 2


class _Payload(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    pass


class _Frame(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", omit_defaults=True):
    from_: str = msgspec.field(name="from")
    to: str


# -- handshake ---------------------------------------------------------------------------


class HelloPayload(_Payload, frozen=True, omit_defaults=False):
    """Always sent in full: the peer checks `protocol_version` before anything else."""

    pid: int
    kind: str
    name: str
    instance_key: str
    generation: int
    protocol_version: int = PROTOCOL_VERSION
    features: list[str] = msgspec.field(default_factory=list)
    """Optional frames this child sends: `history` (cluster mode asks for it in the launch
    settings; a node refuses a child that does not say it will)."""


class ReadyPayload(_Payload, frozen=True):
    pid: int
    tools: list[str] = msgspec.field(default_factory=list)
    """Names in the process's tool registry, for `status` and debugging."""
    pending_events: int = 0
    """Events the child recovered from its own log and will process on its own."""


class StartErrorPayload(_Payload, frozen=True):
    error: ErrorInfo


class Hello(_Frame, frozen=True, tag="hello"):
    payload: HelloPayload


class Ready(_Frame, frozen=True, tag="ready"):
    payload: ReadyPayload


class StartError(_Frame, frozen=True, tag="start_error"):
    payload: StartErrorPayload


# -- events and status -------------------------------------------------------------------


class Event(_Frame, frozen=True, tag="event"):
    payload: AgentEvent


class ChildState(StrEnum):
    IDLE = "idle"
    PROCESSING = "processing"


class TurnOutcome(StrEnum):
    COMPLETED = "completed"
    FAILED = "failed"
    MAX_STEPS = "max_steps"


class ToolSample(msgspec.Struct, frozen=True, array_like=True):
    """One tool call: its full name, how long it took, its error code ("" when ok)."""

    name: str
    ms: float
    code: str = ""


class TurnMetrics(_Payload, frozen=True):
    """What the agent's turns did since its last report: counter deltas the daemon adds to its
    metrics (ARCHITECTURE.md §13), sent on the idle `status` that ends a turn, so the daemon
    aggregates without scraping its children and the hot path gains no frame."""

    model: str = ""
    turns: dict[str, int] = msgspec.field(default_factory=dict)
    """Outcome (`completed`, `failed`, `max_steps`) -> turns."""
    turn_ms: list[float] = msgspec.field(default_factory=list)
    steps: int = 0
    tools: list[ToolSample] = msgspec.field(default_factory=list)
    errors: dict[str, int] = msgspec.field(default_factory=dict)
    """Error code of a failed turn -> turns (tool errors are in `tools`)."""
    input_tokens: int = 0
    output_tokens: int = 0


class StatusPayload(_Payload, frozen=True):
    state: ChildState
    turn_id: str | None = None
    event_id: str | None = None
    """The event whose turn started (processing) or ended (idle)."""
    queue_depth: int = 0
    last_turn: TurnOutcome | None = None
    """Set on the idle report that ends a turn; a completed turn resets the crash counter."""
    metrics: TurnMetrics | None = None
    """On the idle report that ends a turn: what it (and anything since the last report) did."""


class Status(_Frame, frozen=True, tag="status"):
    payload: StatusPayload


# -- cluster mode: the conversation's appends -------------------------------------------

FEATURE_HISTORY = "history"


class HistoryPayload(_Payload, frozen=True):
    """One conversation event (append/replace/remove/truncate) as the JSON line the child
    wrote to its `events.jsonl`; in cluster mode the node publishes it to the history
    stream (ARCHITECTURE.md §15). Sent only when the launch asks (`historyFrames`)."""

    line: bytes


class History(_Frame, frozen=True, tag="history"):
    payload: HistoryPayload


# -- runtime calls that are not events ---------------------------------------------------


class CallOp(StrEnum):
    SPAWN = "spawn"
    LIST = "list"
    CATALOG = "catalog"
    RESTART = "restart"
    DEFERRED_SUBMIT = "deferred_submit"
    DEFERRED_RESOLVE = "deferred_resolve"
    SEND = "send"
    """`agents__send`: args {to, event}; answered once the daemon accepted (journaled) it."""
    MODEL_PERMIT = "model_permit"
    """Before a model call: args {model, eventId, estimatedTokens}; answered when the Model's
    shared rate limit has room, or with E_AGENT_BUDGET_EXCEEDED (orchestrator/calls/permits.py)."""
    MODEL_USAGE = "model_usage"
    """After a model call: args {model, eventId, inputTokens, outputTokens, cachedInputTokens,
    costUsd, estimatedTokens, rateLimited, retryAfterSeconds}; never answered."""


class CallPayload(_Payload, frozen=True):
    """`args` are the op's JSON arguments, validated by the orchestrator's handler for `op`."""

    call_id: str
    op: CallOp
    args: JsonObject = msgspec.field(default_factory=dict)


class CallResultPayload(_Payload, frozen=True):
    """`ok` with a JSON `result`, or a coded `error`; never both."""

    call_id: str
    ok: bool
    result: Any = None
    error: ErrorInfo | None = None


class Call(_Frame, frozen=True, tag="call"):
    payload: CallPayload


class CallResult(_Frame, frozen=True, tag="call_result"):
    payload: CallResultPayload


# -- streamed turn progress ------------------------------------------------------------


class Delta(_Frame, frozen=True, tag="delta"):
    """A piece of a turn in progress (protocol.stream): agent -> orchestrator for a request
    whose `replyTo.stream` is set, orchestrator -> connector for the connector's own emits.
    Best-effort and never journaled; the reply that follows is the whole answer."""

    payload: StreamDelta


# -- liveness and shutdown ---------------------------------------------------------------


class HeartbeatPayload(_Payload, frozen=True):
    """Liveness (ARCHITECTURE.md §4). A child beats only while it runs a turn that is not
    waiting for a client, and the orchestrator answers each beat; an idle child is silent,
    and the orchestrator probes it now and then (and when it hands it events). A beat is
    answered only when `answer` is false, so a probe and its answer never ping-pong."""

    seq: int
    sent_at: float = 0.0
    answer: bool = False
    """This beat answers one (it asks for nothing back)."""
    quiet: bool = False
    """From a child: its turn now waits for a client and it stops beating until the turn
    goes on (its next beat says so); its silence meanwhile is not a wedge."""


class Heartbeat(_Frame, frozen=True, tag="heartbeat"):
    payload: HeartbeatPayload


class ShutdownReason(StrEnum):
    CONFIG_CHANGE = "config_change"
    RESTART = "restart"
    ORCHESTRATOR_SHUTDOWN = "orchestrator_shutdown"
    IDLE = "idle"


class ShutdownPayload(_Payload, frozen=True):
    grace_period_ms: int = 30_000
    reason: ShutdownReason = ShutdownReason.ORCHESTRATOR_SHUTDOWN


class ShutdownAckPayload(_Payload, frozen=True):
    drained: bool = True
    undelivered_events: list[str] = msgspec.field(default_factory=list)
    """Ids of queued events the child did not start; the orchestrator hands them on."""


class Shutdown(_Frame, frozen=True, tag="shutdown"):
    payload: ShutdownPayload


class ShutdownAck(_Frame, frozen=True, tag="shutdown_ack"):
    payload: ShutdownAckPayload


Message = (
    Hello
    | Ready
    | StartError
    | Event
    | Status
    | Call
    | CallResult
    | Heartbeat
    | Shutdown
    | ShutdownAck
    | Delta
    | History
)
"""The closed union of every frame. Dispatch with `match` ending in `assert_never`."""

MESSAGE_TYPES: tuple[type[Message], ...] = (
    Hello,
    Ready,
    StartError,
    Event,
    Status,
    Call,
    CallResult,
    Heartbeat,
    Shutdown,
    ShutdownAck,
    Delta,
    History,
)
