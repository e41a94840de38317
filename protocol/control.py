"""CLI <-> daemon messages on the control socket: one request union, one reply type.

The CLI connects a DEALER to `control.sock` and sends one request; the daemon answers with a
`ControlReply` carrying the same `request_id`. Errors come back as coded data, never as a
dropped connection.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from protocol.errors import ErrorInfo
from protocol.jsontypes import JsonObject
from protocol.stream import StreamDelta

STREAM_WINDOW = 64
"""Interim delta replies the daemon sends a streaming client before it hears `StreamAck`."""


class _Request(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", omit_defaults=True, rename="camel"
):
    request_id: str
    token: str = ""
    """The daemon's control capability (`<run dir>/control.token`): E_CONTROL_FORBIDDEN without."""


class Ping(_Request, frozen=True, tag="ping"):
    """Health check: the reply carries the orchestrator summary."""


class SendText(_Request, frozen=True, tag="send"):
    """`goondan send`: one input to an agent; with `wait`, the reply is the response event."""

    text: str
    agent: str | None = None
    instance_key: str | None = None
    event_type: str = "user.message"
    wait: bool = True
    timeout_ms: int = 120_000
    metadata: JsonObject = msgspec.field(default_factory=dict)
    idempotency_key: str | None = None
    """A retry with the same key within 24 h is the first send: same event id, same reply."""
    stream: bool = False
    """Interim replies carry the turn's deltas (`ControlReply.delta`) before the final one;
    the client acknowledges them with `StreamAck`. Needs `wait`."""
    announce: bool = False
    """With `wait`: an interim reply carries the event id (`ControlReply.accepted`) as soon as
    the input is journaled, so a client that gives up waiting can name it (`send --attach`)."""


class Attach(_Request, frozen=True, tag="attach"):
    """`goondan send --attach ID`: the reply of an event sent before (waits while it runs)."""

    event_id: str
    timeout_ms: int = 120_000


class StreamAck(_Request, frozen=True, tag="stream_ack"):
    """One-way (no reply): the client of the streaming send `request_id` has read `received`
    deltas; the daemon keeps at most STREAM_WINDOW of them unread, and merges or drops the
    rest until the client catches up. The final reply never waits for it."""

    received: int


class StatusQuery(_Request, frozen=True, tag="status"):
    pass


class Restart(_Request, frozen=True, tag="restart"):
    agent: str | None = None
    fresh: bool = False
    instance_key: str | None = None
    """Only this instance of `agent` (Studio's per-row button); None: every instance."""


class ProcessStop(_Request, frozen=True, tag="process_stop"):
    """Stop one agent instance's process gracefully; the next event for it starts it again."""

    agent: str
    instance_key: str


class Reload(_Request, frozen=True, tag="reload"):
    """Re-read the bundle and restart what changed (SIGHUP does the same)."""


class Stop(_Request, frozen=True, tag="stop"):
    wait: bool = False
    """Answer after the drain with a StopReport (else at once, `{"stopping": true}`)."""


class InstanceList(_Request, frozen=True, tag="instance_list"):
    pass


class InstanceDelete(_Request, frozen=True, tag="instance_delete"):
    instance_key: str
    agent: str | None = None


class CallsList(_Request, frozen=True, tag="calls_list"):
    pass


class CallsResolve(_Request, frozen=True, tag="calls_resolve"):
    """Answer a pending deferred call with a JSON-RPC result or error."""

    call_id: str
    result: Any = None
    error_code: int | None = None
    error_message: str | None = None
    error_data: Any = None
    timeout_ms: int = 120_000
    """How long to wait for the resumed turn's reply (when the control client started it)."""


class CallsDecide(_Request, frozen=True, tag="calls_decide"):
    """`goondan calls approve|deny ID`: a person's decision on a `goondan.approve` call."""

    call_id: str
    approve: bool
    message: str | None = None
    by: str = ""
    """Not read: the daemon records the OS user of the requesting process (SO_PEERCRED)."""
    timeout_ms: int = 120_000
    via: Literal["cli", "studio"] = "cli"
    """Where the person decided (`goondan calls`, Studio's approve/deny buttons)."""


class ClusterStatusQuery(_Request, frozen=True, tag="cluster_status"):
    """`goondan cluster status`: the swarm's nodes, partitions and lag (cluster mode)."""


class ClusterDrain(_Request, frozen=True, tag="cluster_drain"):
    """`goondan cluster drain NODE`: move the node's partitions away before maintenance."""

    node: str


class InstanceHistory(_Request, frozen=True, tag="instance_history"):
    """`goondan instance show` on a cluster node: the instance's conversation events from the
    swarm's history stream (wherever it runs), each agent's after the sequence `after` gives.
    Result: `{"agents": {agent: {"lines": [jsonl...], "lastSeq": n, "more": bool}}}`; `more`
    when the reply was cut at its size bound (ask again from `lastSeq`)."""

    instance_key: str
    agent: str | None = None
    after: dict[str, int] = msgspec.field(default_factory=dict)


class LogsQuery(_Request, frozen=True, tag="logs"):
    """`goondan logs` on a cluster node: every node's matching lines, merged by time. Result:
    `{"lines": [{"at", "node", "kind", "swarm", "data", "agent"?, "instance"?}],
    "dropped": {node: n}, "unanswered": [node]}`; with `follower`, only lines written since
    the last ask with that id."""

    agent: str | None = None
    instance: str | None = None
    trace: str | None = None
    since: float | None = None
    follower: str | None = None


ControlRequest = (
    Ping
    | SendText
    | Attach
    | StatusQuery
    | Restart
    | ProcessStop
    | Reload
    | Stop
    | InstanceList
    | InstanceDelete
    | CallsList
    | CallsResolve
    | CallsDecide
    | StreamAck
    | ClusterStatusQuery
    | ClusterDrain
    | InstanceHistory
    | LogsQuery
)

CONTROL_REQUEST_TYPES: tuple[type[ControlRequest], ...] = (
    Ping,
    SendText,
    StatusQuery,
    Restart,
    ProcessStop,
    Reload,
    Stop,
    InstanceList,
    InstanceDelete,
    CallsList,
    CallsResolve,
    CallsDecide,
    StreamAck,
    ClusterStatusQuery,
    ClusterDrain,
    InstanceHistory,
    LogsQuery,
)


class ControlReply(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    request_id: str
    ok: bool
    result: Any = None
    error: ErrorInfo | None = None
    notice: str | None = None
    """An interim reply: something the client should hear while the request goes on (e.g.
    why a `send` waits). The final reply for the same `request_id` follows."""
    delta: StreamDelta | None = None
    """An interim reply of a streaming `send`: a piece of the turn in progress."""
    accepted: str | None = None
    """An interim reply of a `send` that asked to `announce`: the event id of its input."""

    @property
    def interim(self) -> bool:
        """A notice, a delta or an announced event id: the final reply is still to come."""
        return self.notice is not None or self.delta is not None or self.accepted is not None


# -- typed results (what `status --json` prints) -----------------------------------------


class OrchestratorInfo(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    pid: int
    swarm: str
    bundle: str
    started_at: str
    version: str
    state_root: str
    endpoints: dict[str, str] = msgspec.field(default_factory=dict)
    node: str = ""
    """Cluster mode: this node's name (empty on one machine)."""


class ExitInfo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    code: int | None = None
    signal: int | None = None
    at: str | None = None
    reason: str | None = None


class ProcessInfo(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    id: str
    kind: str
    name: str
    instance_key: str
    pid: int | None
    status: str
    restarts: int
    generation: int
    last_exit: ExitInfo | None = None
    retry_in_seconds: float | None = None
    """For `crashLoopBackOff` and `startFailed`: when the next start is due."""
    pending: int = 0
    """Accepted events the journal holds for this instance (not yet finished)."""
    node: str | None = None
    """Cluster mode: the node that runs it."""
    calls: list[str] = msgspec.field(default_factory=list)
    """`waiting`: the ids of the client-side calls (approvals among them) its turn waits for."""


FAILING = frozenset({"crashed", "crashLoopBackOff", "startFailed"})
"""Statuses that make `goondan status` exit non-zero."""
DEACTIVATED = "deactivated"
"""The status of an instance that was deactivated (idle, or room made at the live bound): no
process, its state on disk, started again by its next event. Not a failure."""
WAITING = "waiting"
"""The status of an instance whose turn waits for a client-side call (an approval): `calls`
names them. Not a failure, and idle for the live bound and the idle timeout."""


class UsageInfo(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Today's (UTC) usage of an agent or of the whole swarm, and its budget's limits."""

    scope: str
    """`agent` or `swarm`."""
    name: str
    day: str
    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cost_usd: float = 0.0
    turns_per_day: int | None = None
    tokens_per_day: int | None = None
    cost_usd_per_day: float | None = None
    exceeded: str | None = None
    """The limit that is used up (`turnsPerDay`, `tokensPerDay`, `costUsdPerDay`), if any."""


class ModelLimitInfo(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A Model's shared rate limit: calls waiting for a permit, and until when a provider's
    429 holds everyone back."""

    name: str
    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None
    waiting: int = 0
    blocked_for_seconds: float = 0.0
    granted: int = 0


class StatusResult(msgspec.Struct, frozen=True, kw_only=True):
    orchestrator: OrchestratorInfo
    processes: list[ProcessInfo] = msgspec.field(default_factory=list)
    usage: list[UsageInfo] = msgspec.field(default_factory=list)
    models: list[ModelLimitInfo] = msgspec.field(default_factory=list)
    unanswered: list[str] = msgspec.field(default_factory=list)
    """Cluster mode: live nodes whose process table did not come (their rows are missing)."""


class StopReport(msgspec.Struct, kw_only=True):
    """What a stop did (`goondan stop` prints it; the daemon logs it as `drained`)."""

    drained: list[str] = msgspec.field(default_factory=list)
    """Processes that finished their turn and exited on their own."""
    killed: list[str] = msgspec.field(default_factory=list)
    """Processes SIGKILLed: the grace period ran out, or a second signal forced the stop."""
    kept: int = 0
    """Queued events left open in the journal: they run after the next start."""
    dropped: int = 0
    """Queued events answered with E_AGENT_SHUTTING_DOWN (no journal)."""
    grace_seconds: float = 0.0

    def lines(self) -> list[str]:
        """The human summary, one fact per line."""
        out = [f"{len(self.drained)} process(es) drained"]
        if self.killed:
            out.append(f"{len(self.killed)} killed after the {self.grace_seconds:g} s grace "
                       "period (or a forced stop): " + ", ".join(self.killed))  # fmt: skip
        if self.kept:
            out.append(f"{self.kept} queued event(s) kept in the journal: they run after the "
                       "next start")  # fmt: skip
        if self.dropped:
            out.append(f"{self.dropped} queued event(s) dropped (the journal is off)")
        return out
