"""The connector host: a supervised child of kind `connector`, one per Connection.

    hello -> load the Connection's connector, `await start(ctx)` -> ready | start_error (exit 3)
    run(ctx) serves; each `ctx.emit` is an `event` frame to the orchestrator, whose answer
    (routed back by correlation id) completes the emit
    shutdown / SIGTERM -> no more emits, cancel run(ctx) -> shutdown_ack -> exit 0
    run(ctx) returns or raises -> exit 1 (a crash: the supervisor respawns it, always up)

The process id is `connector:<Connection name>:<Connector name>:<generation>`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
import uuid

import structlog
import zmq
import zmq.asyncio

from agent_process import preload as preloaded
from agent_process.child import EXIT_ORPHANED, EXIT_START_ERROR
from agent_process.child_options import ChildOptions
from agent_process.connector_context import (
    ConnectorStartFailed,
    HostContext,
    LoadedConnector,
    load_connector,
)
from bundles import redact
from bundles.diagnostics import BundleError
from bundles.loader import load_bundle
from protocol.codec import decode_message, encode
from protocol.endpoints import StateLayout
from protocol.errors import ErrorCode, ErrorInfo, ProtocolError
from protocol.ids import ORCHESTRATOR
from protocol.messages import (
    ChildState,
    Event,
    Heartbeat,
    HeartbeatPayload,
    Hello,
    HelloPayload,
    Message,
    Ready,
    ReadyPayload,
    Shutdown,
    ShutdownAck,
    ShutdownAckPayload,
    StartError,
    StartErrorPayload,
    Status,
    StatusPayload,
    TurnOutcome,
)

EXIT_CONNECTOR_STOPPED = 1
log = structlog.get_logger("goondan.connector_host")


def _run_identity(opts: ChildOptions) -> tuple[int | None, str]:
    """The daemon's pid and a run id that stays the same across respawns of this connector
    (pid + start time of the daemon's pid file) but differs between runs."""
    pid_file = StateLayout.from_env(opts.state_root).run_paths(opts.swarm).pid_file
    try:
        pid = int(pid_file.read_text().split()[0])
        return pid, f"{pid}-{int(pid_file.stat().st_mtime):x}"
    except (OSError, ValueError, IndexError):
        return opts.parent_pid, uuid.uuid4().hex[:12]


def _start_failure(exc: BaseException) -> ErrorInfo:
    if isinstance(exc, ConnectorStartFailed):
        return exc.error
    return ErrorInfo(
        code=ErrorCode.E_CONNECTOR_START_FAILED,
        message=f"{type(exc).__name__}: {exc}",
        suggestion="fix the connector's config (e.g. a port in use), then `goondan restart`",
    )


class ConnectorHost:
    def __init__(self, opts: ChildOptions, sock: zmq.asyncio.Socket) -> None:
        self.opts = opts
        self.sock = sock
        self.me = str(opts.process_id)
        self.loaded: LoadedConnector | None = None
        self.ctx: HostContext | None = None
        self.draining = asyncio.Event()
        self.last_heard = time.monotonic()
        self._reported = 0

    async def send(self, msg: Message) -> None:
        await self.sock.send(encode(msg))

    def _load(self) -> LoadedConnector:
        opts = self.opts
        bundle = preloaded.take(opts.bundle, opts.env_files, opts.state_root)
        if bundle is None:
            try:
                bundle = load_bundle(
                    opts.bundle, env_files=opts.env_files, state_root=opts.state_root
                )
            except BundleError as exc:
                raise ConnectorStartFailed(
                    ErrorInfo(
                        code=ErrorCode.E_CONNECTOR_START_FAILED,
                        message=str(exc),
                        suggestion="fix the bundle (goondan validate)",
                    )
                ) from exc
        redact.install(bundle.secret_values)  # e.g. a signing secret never reaches the log
        return load_connector(bundle, opts.process_id.name, opts.state_root)

    async def start(self) -> bool:
        pid = self.opts.process_id
        hello = HelloPayload(
            pid=os.getpid(),
            kind=str(pid.kind),
            name=pid.name,
            instance_key=pid.instance_key,
            generation=pid.generation,
        )
        await self.send(Hello(from_=self.me, to=ORCHESTRATOR, payload=hello))
        try:
            self.loaded = loaded = self._load()
            daemon_pid, run_id = _run_identity(self.opts)
            self.ctx = HostContext(
                process_id=pid,
                send=self.send,
                config=loaded.config,
                secrets=loaded.secrets,
                connector=loaded.connector.name,
                orchestrator_pid=daemon_pid,
                run_id=run_id,
                state_dir=StateLayout.from_env(self.opts.state_root).connector_state_dir(
                    self.opts.swarm, pid.name
                ),
            )
            if loaded.start is not None:
                await loaded.start(self.ctx)
        except Exception as exc:
            info = _start_failure(exc)
            log.error("start_error", code=info.code, message=info.message)
            payload = StartErrorPayload(error=info)
            await self.send(StartError(from_=self.me, to=ORCHESTRATOR, payload=payload))
            return False
        await self.send(
            Ready(from_=self.me, to=ORCHESTRATOR, payload=ReadyPayload(pid=os.getpid()))
        )
        log.info("connector_ready", connector=loaded.connector.name, config=sorted(loaded.config))
        return True

    async def serve(self) -> int:
        """Run the connector until shutdown (0) or until it stops by itself (1)."""
        assert self.loaded is not None
        assert self.ctx is not None
        # run(ctx) is not in the TaskGroup: its failure is an exit code, not a group error
        run = asyncio.ensure_future(self.loaded.run(self.ctx))
        async with asyncio.TaskGroup() as tg:
            recv = tg.create_task(self._recv_loop())
            beat = tg.create_task(self._heartbeat_loop())
            stop = tg.create_task(self.draining.wait())
            await asyncio.wait({run, stop}, return_when=asyncio.FIRST_COMPLETED)
            code = 0 if stop.done() else self._stopped_by_itself(run)
            self.ctx.close()
            run.cancel()
            stop.cancel()
            with contextlib.suppress(BaseException):
                await run
            if code == 0:
                ack = ShutdownAckPayload(undelivered_events=[])
                await self.send(ShutdownAck(from_=self.me, to=ORCHESTRATOR, payload=ack))
            recv.cancel()
            beat.cancel()
        return code

    def _stopped_by_itself(self, run: asyncio.Task[None]) -> int:
        exc = None if run.cancelled() else run.exception()
        if exc is not None:
            log.error("connector_failed", error=f"{type(exc).__name__}: {exc}", exc_info=exc)
        else:
            log.error("connector_returned", hint="run(ctx) must serve until it is cancelled")
        return EXIT_CONNECTOR_STOPPED

    async def _recv_loop(self) -> None:
        while True:
            data = await self.sock.recv()
            self.last_heard = time.monotonic()
            try:
                msg = decode_message(data)
            except ProtocolError as exc:
                log.warning("frame_dropped", sender=ORCHESTRATOR, reason=exc.message)
                continue
            self._dispatch(msg)

    def _dispatch(self, msg: Message) -> None:
        match msg:
            case Event(payload=event):
                if self.ctx is None or not self.ctx.deliver(event):
                    log.info("response_unclaimed", event_id=event.id, type=event.type)
            case Shutdown(payload=payload):
                log.info("shutdown", reason=payload.reason, grace_ms=payload.grace_period_ms)
                self.draining.set()
            case Heartbeat():
                pass
            case _:
                log.warning("frame_unexpected", type=type(msg).__name__)

    async def _report_served(self) -> None:
        """An answered emit counts as a completed turn: the supervisor then resets this
        connector's crash counter, so rare crashes over a long life never back it off."""
        if self.ctx is None or self.ctx.answered == self._reported:
            return
        self._reported = self.ctx.answered
        payload = StatusPayload(state=ChildState.IDLE, last_turn=TurnOutcome.COMPLETED)
        await self.send(Status(from_=self.me, to=ORCHESTRATOR, payload=payload))

    async def _heartbeat_loop(self) -> None:
        seq = 0
        while True:
            await asyncio.sleep(self.opts.heartbeat_interval)
            seq += 1
            beat = HeartbeatPayload(seq=seq, sent_at=time.time())
            await self.send(Heartbeat(from_=self.me, to=ORCHESTRATOR, payload=beat))
            await self._report_served()
            if time.monotonic() - self.last_heard > self.opts.heartbeat_timeout:
                log.error("orchestrator_lost", silent_for=self.opts.heartbeat_timeout)
                sys.stdout.flush()
                os._exit(EXIT_ORPHANED)


async def amain(opts: ChildOptions) -> int:
    zctx = zmq.asyncio.Context()
    sock = zctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, opts.process_id.encode())
    sock.setsockopt(zmq.LINGER, 2000)
    sock.connect(opts.endpoint)
    host = ConnectorHost(opts, sock)
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, host.draining.set)
    try:
        if not await host.start():
            return EXIT_START_ERROR
        return await host.serve()
    finally:
        sock.close()
        zctx.term()
