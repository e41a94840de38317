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
import uuid
from pathlib import Path

import structlog

from agent_process import preload as preloaded
from agent_process import secretenv
from agent_process.connector_context import (
    ConnectorStartFailed,
    HostContext,
    LoadedConnector,
    load_connector,
)
from agent_process.link import EXIT_START_ERROR, Link, connect
from bundles import redact
from bundles.diagnostics import BundleError
from protocol.endpoints import StateLayout
from protocol.errors import ErrorCode, ErrorInfo
from protocol.ids import ORCHESTRATOR
from protocol.launch import ChildLaunch
from protocol.messages import (
    ChildState,
    Delta,
    Event,
    Heartbeat,
    Message,
    Shutdown,
    Status,
    StatusPayload,
    TurnOutcome,
)

EXIT_CONNECTOR_STOPPED = 1
log = structlog.get_logger("goondan.connector_host")


def _run_identity(launch: ChildLaunch) -> tuple[int | None, str]:
    """The daemon's pid and a run id that stays the same across respawns of this connector
    (pid + start time of the daemon's pid file) but differs between runs."""
    settings = launch.settings
    pid_file = StateLayout.from_env(Path(settings.state_root)).run_paths(settings.swarm).pid_file
    try:
        pid = int(pid_file.read_text().split()[0])
        return pid, f"{pid}-{int(pid_file.stat().st_mtime):x}"
    except (OSError, ValueError, IndexError):
        return launch.parent_pid, uuid.uuid4().hex[:12]


def _start_failure(exc: Exception) -> ErrorInfo:
    if isinstance(exc, ConnectorStartFailed):
        return exc.error
    return ErrorInfo(
        code=ErrorCode.E_CONNECTOR_START_FAILED,
        message=f"{type(exc).__name__}: {exc}",
        suggestion="fix the connector's config (e.g. a port in use), then `goondan restart`",
    )


class ConnectorHost:
    def __init__(self, launch: ChildLaunch, link: Link) -> None:
        self.launch = launch
        self.link = link
        self.send = link.send
        self.me = link.me
        self.loaded: LoadedConnector | None = None
        self.ctx: HostContext | None = None
        self.draining = link.draining
        self._reported = 0
        self.loaded_secrets: frozenset[str] = frozenset()

    def _load(self) -> LoadedConnector:
        settings = self.launch.settings
        try:
            bundle = preloaded.child_bundle(settings)
        except BundleError as exc:
            raise ConnectorStartFailed(
                ErrorInfo(
                    code=ErrorCode.E_CONNECTOR_START_FAILED,
                    message=str(exc),
                    suggestion="fix the bundle (goondan validate)",
                )
            ) from exc
        redact.install(bundle.secret_values)  # e.g. a signing secret never reaches the log
        self.loaded_secrets = bundle.secret_values
        return load_connector(bundle, self.launch.process.name, Path(settings.state_root))

    async def _start_connector(self) -> list[str]:
        """Load the connector and `await start(ctx)`; a connector has no tools to report."""
        pid = self.launch.process
        self.loaded = loaded = self._load()
        daemon_pid, run_id = _run_identity(self.launch)
        self.ctx = HostContext(
            process_id=pid,
            send=self.send,
            config=loaded.config,
            secrets=loaded.secrets,
            connector=loaded.connector.name,
            swarm=loaded.swarm,
            orchestrator_pid=daemon_pid,
            run_id=run_id,
            state_dir=StateLayout.from_env(
                Path(self.launch.settings.state_root)
            ).connector_state_dir(self.launch.settings.swarm, pid.name),
        )
        if loaded.start is not None:
            await loaded.start(self.ctx)
        # started: the connector holds its credentials; no subprocess inherits them
        dropped = secretenv.drop_secret_variables(self.loaded_secrets)
        if dropped:
            log.info("secret_variables_removed", names=dropped)
        return []

    async def start(self) -> bool:
        if not await self.link.handshake(self._start_connector, _start_failure):
            return False
        loaded = self.loaded
        assert loaded is not None
        log.info("connector_ready", connector=loaded.connector.name, config=sorted(loaded.config))
        return True

    async def serve(self) -> int:
        """Run the connector until shutdown (0) or until it stops by itself (1)."""
        return await self.link.serve(self._run(), self._dispatch, self._report_served)

    async def _run(self) -> int:
        assert self.loaded is not None
        assert self.ctx is not None
        # run(ctx) is not in a TaskGroup: its failure is an exit code, not a group error
        run = asyncio.ensure_future(self.loaded.run(self.ctx))
        stop = asyncio.ensure_future(self.draining.wait())
        try:
            await asyncio.wait({run, stop}, return_when=asyncio.FIRST_COMPLETED)
            code = 0 if stop.done() else self._stopped_by_itself(run)
        finally:  # also when a failing link loop cancels us
            stop.cancel()
        self.ctx.close()
        run.cancel()
        with contextlib.suppress(BaseException):
            await run
        if code == 0:
            await self.link.shutdown_ack([])
        return code

    def _stopped_by_itself(self, run: asyncio.Task[None]) -> int:
        exc = None if run.cancelled() else run.exception()
        if exc is not None:
            log.error("connector_failed", error=f"{type(exc).__name__}: {exc}", exc_info=exc)
        else:
            log.error("connector_returned", hint="run(ctx) must serve until it is cancelled")
        return EXIT_CONNECTOR_STOPPED

    def _dispatch(self, msg: Message) -> None:
        match msg:
            case Event(payload=event):
                if self.ctx is None or not self.ctx.deliver(event):
                    log.info("response_unclaimed", event_id=event.id, type=event.type)
            case Delta(payload=delta):
                if self.ctx is not None:
                    self.ctx.deliver_delta(delta)  # late ones (emit gone) are just dropped
            case Shutdown(payload=payload):
                self.link.on_shutdown(payload)
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


async def amain(launch: ChildLaunch) -> int:
    async with connect(launch) as link:
        host = ConnectorHost(launch, link)
        if not await host.start():
            return EXIT_START_ERROR
        return await host.serve()
