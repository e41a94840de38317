"""The agent child's composition root: FIFO turns over the orchestrator link (`link.py`).

    hello -> load the runner -> ready | start_error (exit 3)
    event -> queue (FIFO, one turn at a time) -> status processing -> turn -> reply -> status idle
    shutdown -> stop taking events, finish the current turn -> shutdown_ack -> exit 0

The turn executor is injected (`TurnRunner`): the real `AgentRuntime` by default, or the
factory named by `GOONDAN_TURN_RUNNER=module:function` (tests only). A turn that fails still
answers a `replyTo` with a coded error: the caller never waits in silence.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Protocol

import setproctitle
import structlog
import uvloop

from agent_process import deferred, logs, resolve, secretenv
from agent_process import limits as agent_limits
from agent_process import preload as preloaded
from agent_process.bridge import Bridge
from agent_process.deferred import DeferredCalls, DeferredPolicy, PendingStore, policy_from_bundle
from agent_process.inbox import WAKE_EVENT_TYPE, Inbox, spawn_workdir
from agent_process.link import EXIT_START_ERROR, Link, connect, die_with_parent, refuse_dumps
from agent_process.runtime import AgentRuntime, StartFailure
from agent_process.turn import Resumed
from bundles import redact
from bundles.diagnostics import BundleError
from bundles.model import Bundle
from protocol.endpoints import StateLayout
from protocol.errors import ErrorCode, ErrorInfo, ProtocolError
from protocol.events import AgentEvent, Source, SourceKind, new_event, response_to
from protocol.ids import ORCHESTRATOR, ProcessId, ProcessKind
from protocol.jsonrpc import PendingCall
from protocol.jsontypes import JsonObject
from protocol.launch import ChildLaunch, decode_launch
from protocol.messages import (
    Call,
    CallOp,
    CallResult,
    ChildState,
    Delta,
    Event,
    Heartbeat,
    Hello,
    History,
    HistoryPayload,
    Message,
    Ready,
    Shutdown,
    ShutdownAck,
    StartError,
    Status,
    StatusPayload,
    TurnOutcome,
)
from protocol.stream import StreamDelta

ENV_TURN_RUNNER = "GOONDAN_TURN_RUNNER"
log = structlog.get_logger("goondan.child")


class TurnReport(Protocol):
    """What the child needs from a turn's result (`agent_process.runtime.TurnResult`)."""

    @property
    def outcome(self) -> TurnOutcome: ...
    @property
    def text(self) -> str: ...
    @property
    def error(self) -> ErrorInfo | None: ...
    @property
    def usage(self) -> dict[str, int]: ...


class TurnRunner(Protocol):
    @property
    def tool_names(self) -> list[str]: ...

    async def run_turn(self, event: AgentEvent, resumed: Resumed | None = None) -> TurnReport:
        """One turn; with `resumed`, the rest of a turn a deferred call suspended in an
        earlier process of this instance (only a runner that defers calls ever gets one)."""

    async def close(self) -> None: ...


RunnerFactory = Callable[[ChildLaunch, Bridge], Awaitable[TurnRunner]]
Park = Callable[[Awaitable[TurnReport], asyncio.Event, asyncio.Event], Awaitable[TurnReport | None]]
"""How a turn races the drain (`deferred.unless_parked`)."""
USAGE = """usage: python -m agent_process LAUNCH | -
LAUNCH is the JSON the daemon's spawner writes (protocol/launch.py ChildLaunch), or `-` to read
it from stdin: agent children are started by `goondan run`, not by hand."""


async def runtime_factory(launch: ChildLaunch, bridge: Bridge) -> TurnRunner:
    """The real engine: load the bundle, then `AgentRuntime.create` (raises StartFailure)."""
    try:
        bundle = preloaded.child_bundle(launch.settings)
    except BundleError as exc:
        first = exc.diagnostics[0] if exc.diagnostics else None
        raise StartFailure(
            ErrorInfo(
                code=first.code if first else ErrorCode.E_CONFIG_PARSE_ERROR,
                message=str(exc),
                suggestion="fix the bundle (goondan validate), then `goondan restart`",
            )
        ) from exc
    # Agent.spec.limits hold for everything this process loads and starts from here on
    agent_limits.apply(resolve.limits(bundle, launch.process.name), launch.settings.cgroup)
    redact.install(bundle.secret_values)  # from here on, logs and stdout/stderr mask them
    runtime = await create_runtime(launch, bridge, bundle)
    # the model client, tools and MCP servers hold what they need: no subprocess inherits it
    dropped = secretenv.drop_secret_variables(bundle.secret_values)
    if dropped:
        log.info("secret_variables_removed", names=dropped)
    return runtime


async def create_runtime(
    launch: ChildLaunch, bridge: Bridge, bundle: Bundle, sink: int | None = None
) -> AgentRuntime:
    """This child's `AgentRuntime` of `bundle`; with `sink` it writes nothing to disk (see
    `AgentRuntime.create`: the fork server's rehearsal)."""
    pid, swarm = launch.process, launch.settings.swarm
    layout = StateLayout.from_env(Path(launch.settings.state_root))
    runtime = await AgentRuntime.create(
        bundle=bundle,
        agent=pid.name,
        instance_key=pid.instance_key,
        swarm=swarm,
        layout=layout,
        agents=bridge,
        # `agents.spawn{cwd}` made this instance's workdir cwd
        workdir=spawn_workdir(layout.instance_paths(swarm, pid.instance_key, pid.name).root),
        sink=sink,
        env_files=tuple(map(Path, launch.settings.env_files)),
    )
    runtime.deferred_policy = policy_from_bundle(bundle, swarm)
    return runtime


def select_factory() -> RunnerFactory:
    spec = os.environ.get(ENV_TURN_RUNNER)
    if not spec:
        return runtime_factory
    module_name, _, attr = spec.partition(":")
    factory: RunnerFactory = getattr(importlib.import_module(module_name), attr or "create")
    return factory


def start_error_info(exc: BaseException) -> ErrorInfo:
    """The coded reason of a failed start: the runner's own ErrorInfo when it has one."""
    info = getattr(exc, "error", None)
    if isinstance(info, ErrorInfo):
        return info
    return ErrorInfo(
        code=ErrorCode.E_AGENT_START_FAILED,
        message=f"{type(exc).__name__}: {exc}",
        name=type(exc).__name__,
        suggestion="fix the agent's bundle resources, then send the event again",
    )


def turn_error(report: TurnReport) -> ErrorInfo | None:
    match report.outcome:
        case TurnOutcome.COMPLETED:
            return None
        case TurnOutcome.MAX_STEPS:
            return report.error or ErrorInfo(
                code=ErrorCode.E_AGENT_MAX_STEPS, message="the turn hit maxStepsPerTurn"
            )
        case TurnOutcome.FAILED:
            return report.error or ErrorInfo(
                code=ErrorCode.E_AGENT_TURN_FAILED, message="the turn failed"
            )


class Child:
    """One agent process around its runner. `park` is how a turn races the drain; the fork
    server's rehearsal, which has no event loop, passes one that only awaits the turn."""

    def __init__(
        self, launch: ChildLaunch, link: Link, park: Park = deferred.unless_parked
    ) -> None:
        self.launch = launch
        self.link = link
        self.park = park
        self.send = link.send
        self.me = link.me
        pid = launch.process
        self.source = Source(
            kind=SourceKind(pid.kind), name=pid.name, instance_key=pid.instance_key
        )
        self.queue: asyncio.Queue[AgentEvent | None] = asyncio.Queue()  # None: the drain
        self.bridge = Bridge(self.send)
        self.bridge.bind(self.me, str(pid.address), self.source)
        paths = StateLayout.from_env(Path(launch.settings.state_root)).instance_paths(
            launch.settings.swarm, pid.instance_key, pid.name
        )
        self.inbox = Inbox(paths.inbox_dir)
        self.bridge.inbox = self.inbox
        self.bridge.on_reply = self._wake
        self.runner: TurnRunner | None = None
        # deferred tool calls (ARCHITECTURE.md §10): a turn waiting for its client is parked
        store = PendingStore(paths.pending_calls_dir)
        self.deferred = DeferredCalls(store, DeferredPolicy(), self._submit_deferred)
        self.draining = link.draining
        self.busy = False
        link.on_drain = self._wake_for_drain
        # heartbeats only while a turn runs and does not wait for its client: idle is silent
        link.set_active(False)
        self.deferred.on_park = self._beat_if_working

    async def start(self, factory: RunnerFactory) -> bool:
        """hello -> the runner -> ready | start_error; then the work a previous process of
        this instance left behind."""

        async def load() -> list[str]:
            self.runner = runner = await factory(self.launch, self.bridge)
            if isinstance(runner, AgentRuntime):  # test runners defer and stream nothing
                deferred.install(runner, self.deferred)
                runner.stream_to(self._send_delta)
                if self.launch.settings.history_frames:  # cluster mode (ARCHITECTURE.md §15)
                    runner.store.mirror = self._mirror
            return list(runner.tool_names)

        if not await self.link.handshake(load, start_error_info):
            return False
        resume = self.deferred.resume_event()  # a turn left waiting for its client goes first
        if resume is not None:
            self.queue.put_nowait(resume)
        self._wake()  # async replies stored by an earlier process of this instance
        return True

    def _send_delta(self, delta: StreamDelta) -> bool:
        """A turn's delta for its requester: sent now, or dropped (never waited for)."""
        return self.link.send_nowait(Delta(from_=self.me, to=ORCHESTRATOR, payload=delta))

    def _mirror(self, line: bytes) -> None:
        """Each conversation event, in order, to the node (which publishes it)."""
        payload = HistoryPayload(line=line)
        self.link.post(History(from_=self.me, to=ORCHESTRATOR, payload=payload))

    async def _submit_deferred(self, call: PendingCall) -> None:
        await self.send(deferred.submit_frame(self.me, call))

    def _wake(self) -> None:
        """An idle runtime with stored async replies runs one turn to take them; a busy one
        takes them before its next step (or, if none, through this wake after the turn)."""
        if self.busy or not self.queue.empty() or not self.inbox.has_replies():
            return
        self.queue.put_nowait(
            new_event(
                type=WAKE_EVENT_TYPE,
                input="",
                instance_key=self.source.instance_key or "",
                source=self.source,
            )
        )

    async def serve(self) -> None:
        await self.link.serve(self._drain(), self.dispatch)

    async def _drain(self) -> None:
        """Turns until a drain is asked; the events never started go back with the ack."""
        await self._turn_loop()
        await self.link.shutdown_ack(self._take_queue())

    def _take_queue(self) -> list[str]:
        ids = []
        while not self.queue.empty():
            event = self.queue.get_nowait()
            if event is not None:
                ids.append(event.id)
        return ids

    async def _turn_loop(self) -> None:
        # parked on the queue alone: each asyncio path an idle agent runs costs it pages
        while not self.draining.is_set():
            event = await self.queue.get()
            if event is None:  # the drain's wake-up (_wake_for_drain)
                return
            await self.run_one(event)

    def _beat_if_working(self) -> None:
        parked = self.deferred.parked.is_set()
        self.link.set_active(self.busy and not parked, mid_turn=self.busy and parked)

    def _wake_for_drain(self) -> None:
        """A busy loop sees the drain after its turn; an idle one is parked on the queue."""
        if not self.busy:
            self.queue.put_nowait(None)

    async def run_one(self, event: AgentEvent) -> None:
        assert self.runner is not None
        if event.type == WAKE_EVENT_TYPE and not self.inbox.has_replies():
            return  # the replies were taken by a turn that ran in between
        self.busy = True
        self._beat_if_working()
        self.bridge.current = event
        if isinstance(self.runner, AgentRuntime):  # before the status frame: it goes out first
            await self.runner.ask_ahead(event)
        await self._status(ChildState.PROCESSING, event.id)
        try:
            turn = await self._turn(event)
            if turn is None:  # parked by a drain: its pending call stays for the next process
                self.busy = False
                self._beat_if_working()
                await self.bridge.drop_ahead()  # an unused permit asked ahead goes back
                await self.bridge.flush_usage()
                self.bridge.current = None
                await self._status(ChildState.IDLE, event.id)
                return
            report = turn
            outcome, text, error = report.outcome, report.text, turn_error(report)
            usage = report.usage
            self.deferred.forget_turn(event.id)  # its calls' results are in the conversation
        except Exception as exc:  # the runtime promises not to raise; never go silent anyway
            log.exception("turn_raised", event_id=event.id)
            outcome, text, usage = TurnOutcome.FAILED, "", {}
            error = ErrorInfo(code=ErrorCode.E_AGENT_TURN_FAILED, message=f"{exc}")
        if event.reply_to is not None:
            meta: JsonObject = {"usage": dict(usage)} if usage else {}  # e.g. OpenAI's `usage`
            reply = response_to(event, source=self.source, text=text, error=error, metadata=meta)
            await self.send(Event(from_=self.me, to=event.reply_to.target, payload=reply))
        self.busy = False
        self._beat_if_working()
        await self.bridge.drop_ahead()
        await self.bridge.flush_usage()  # after the reply: it did not wait for them
        self.bridge.current = None
        await self._status(ChildState.IDLE, event.id, outcome)
        self._wake()

    async def _turn(self, event: AgentEvent) -> TurnReport | None:
        """The turn's report, or None when a drain stopped it while it waited for a client."""
        assert self.runner is not None
        turn = self.runner.run_turn(event, self.deferred.resumed_for(event))
        report = await self.park(turn, self.draining, self.deferred.parked)
        if report is None:
            log.info("turn_parked", event_id=event.id)
        return report

    async def _status(
        self, state: ChildState, event_id: str, outcome: TurnOutcome | None = None
    ) -> None:
        metrics = None
        if state is ChildState.IDLE and isinstance(self.runner, AgentRuntime):
            metrics = self.runner.meter.take()  # counter deltas ride on the turn's last frame
        payload = StatusPayload(
            state=state, event_id=event_id, queue_depth=self.queue.qsize(), last_turn=outcome,
            metrics=metrics,
        )  # fmt: skip
        await self.send(Status(from_=self.me, to=ORCHESTRATOR, payload=payload))

    def dispatch(self, msg: Message) -> None:
        match msg:
            case Event(payload=event):
                if event.in_reply_to is not None:
                    self.bridge.deliver_response(event)
                elif self.draining.is_set():
                    log.warning("event_after_shutdown", event_id=event.id)
                else:
                    self.queue.put_nowait(event)
            case CallResult(payload=result):
                self.bridge.deliver_call_result(result)
            case Call(payload=call) if call.op is CallOp.DEFERRED_RESOLVE:
                if call.args.get("stream") is True and isinstance(self.runner, AgentRuntime):
                    self.runner.stream_rest()  # before the turn goes on with the answer
                self.deferred.on_answer(str(call.args.get("id", "")), call.args.get("answer"))
            case Shutdown(payload=payload):
                self.link.on_shutdown(payload)
            case Heartbeat():
                pass
            case (
                Hello()
                | Ready()
                | StartError()
                | Status()
                | Call()
                | ShutdownAck()
                | Delta()
                | History()
            ):
                log.warning("frame_unexpected", type=type(msg).__name__)


async def amain(launch: ChildLaunch, factory: RunnerFactory) -> int:
    async with connect(launch) as link:
        child = Child(launch, link)
        try:
            if not await child.start(factory):
                return EXIT_START_ERROR
            await child.serve()
            return 0
        finally:
            if child.runner is not None:
                await child.runner.close()


def parse_launch(argv: Sequence[str]) -> ChildLaunch | int:
    """The one argument, decoded; else the exit code (0 after --help, 2 after a message)."""
    if list(argv) in (["-h"], ["--help"]):
        sys.stdout.write(USAGE + "\n")
        return 0
    if len(argv) != 1:
        sys.stderr.write(USAGE + "\n")
        return 2
    try:
        # `-`: the launch comes on stdin (a cold start: argv is readable by any process)
        return decode_launch(sys.stdin.read() if argv[0] == "-" else argv[0])
    except ProtocolError as exc:
        sys.stderr.write(f"python -m agent_process: {exc.message}\n")
        return 2


def process_title(pid: ProcessId) -> str:
    """`goondan: agent <name>@<instanceKey>`, `goondan: connector <name>`."""
    if pid.kind is ProcessKind.CONNECTOR:
        return f"goondan: connector {pid.name}"
    return f"goondan: {pid.kind} {pid.name}@{pid.instance_key}"


def main(argv: Sequence[str] | None = None) -> int:
    launch = parse_launch(sys.argv[1:] if argv is None else argv)
    if isinstance(launch, int):
        return launch
    die_with_parent(launch.parent_pid)
    refuse_dumps()
    # what `ps` shows; a cold child also overwrites the environment block it was exec'd with
    # (with API keys) that /proc/<pid>/environ would show (a forked one has an empty one)
    setproctitle.setproctitle(process_title(launch.process))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the orchestrator decides when we stop
    logs.configure(launch.settings.log_format)
    # print() in tools, warnings and tracebacks land in the log file too: mask them as well
    sys.stdout = redact.RedactingStream(sys.stdout)
    sys.stderr = redact.RedactingStream(sys.stderr)
    pid = launch.process
    structlog.contextvars.bind_contextvars(
        process=str(pid), agent=pid.name, instanceKey=pid.instance_key, pid=os.getpid()
    )
    if pid.kind is ProcessKind.CONNECTOR:
        from agent_process import connectors  # the connector host imports this module

        return uvloop.run(connectors.amain(launch))
    return uvloop.run(amain(launch, select_factory()))
