"""The composition root: fork server first, then the loop, sockets, supervisor and servers.

Order matters (ARCHITECTURE.md §8): the fork server is forked while this process still has no zmq
Context, no thread and no event loop. Signal handlers only enqueue; `main()` takes the
first SIGTERM/SIGINT (or `goondan stop`) as "drain every child in parallel, exit 0" and a
second one as "SIGKILL what is left now".
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import signal
import sys
import time
from collections.abc import Awaitable, Coroutine
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog
import zmq
import zmq.asyncio

from bundles.packages.installed import GOONDAN_DISTRIBUTION
from orchestrator import systemd
from orchestrator.cluster.options import ClusterOptions
from orchestrator.control import fence as control_fence
from orchestrator.control import rundir, runpointer
from orchestrator.control.server import ControlContext, ControlServer
from orchestrator.exitcodes import EXIT_USAGE
from orchestrator.ingress.journal.sqlite import SqliteJournal
from orchestrator.ingress.port import Ingress
from orchestrator.observe import daemonlog as logs
from orchestrator.observe.endpoint import Metrics, MetricsUnavailable, start_metrics
from orchestrator.reload import apply as reload
from orchestrator.supervision import cgroups, orphans, proctitle
from orchestrator.supervision.childlog import ChildOutputs
from orchestrator.supervision.forkserver import ENTRY, ForkServerProcess, start_fork_server
from orchestrator.supervision.logfiles import Rotation
from orchestrator.supervision.reconciler import Reconciler
from orchestrator.supervision.settings import Settings, SpawnMode
from orchestrator.supervision.spawner import ColdSpawner, ForkServerSpawner, Spawner
from orchestrator.supervision.supervisor import Supervisor
from orchestrator.supervision.table import ProcessEntry
from orchestrator.wiring import DaemonOptions as DaemonOptions  # what `goondan run` builds
from orchestrator.wiring import OnStarted as OnStarted
from orchestrator.wiring import Parts, Wiring
from protocol.control import OrchestratorInfo, StopReport
from protocol.errors import ErrorCode, ErrorInfo
from protocol.launch import LaunchSettings

if TYPE_CHECKING:  # cluster mode's modules import nats-py: only a --cluster run loads them
    from orchestrator.cluster.node import ClusterNode
    from orchestrator.cluster.nodelink import NodeLink

CHILD_MODULE = "agent_process"
JOURNAL_CLOSE_LIMIT = 10.0
"""How long a stop waits for the journal to write what is queued and close."""
log = structlog.get_logger("goondan.daemon")
Backends = tuple["Metrics | None", "SqliteJournal | None", "NodeLink | None"]
"""What the daemon stores and exports through: its metrics endpoint, the embedded journal or
(cluster mode) the node's NATS connection."""


def _version() -> str:
    try:
        return metadata.version(GOONDAN_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "0+unknown"


def launch_settings(
    opts: DaemonOptions, settings: Settings, endpoint: str, cgroup: Path | None = None
) -> LaunchSettings:
    """What every child of this run is started with (the fork server's warm-up too)."""
    return LaunchSettings(
        endpoint=endpoint,
        swarm=opts.swarm.name,
        bundle=str(opts.bundle.path),
        state_root=str(opts.layout.root),
        env_files=tuple(map(str, opts.env_files)),
        heartbeat_interval=settings.heartbeat_interval,
        heartbeat_timeout=settings.heartbeat_timeout,
        max_frame_bytes=settings.max_frame_bytes,
        history_frames=opts.cluster is not None,
        cgroup=str(cgroup) if cgroup is not None else "",
    )


def _raise_fd_limit() -> None:
    """Each child costs a pidfd and a socket: take the hard limit of open files."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def run(opts: DaemonOptions) -> int:
    """Start the daemon in the foreground; return its exit code. Raises AlreadyRunning."""
    _raise_fd_limit()
    # before the fork server and any thread: /proc/<pid>/environ of the daemon and of every
    # process forked from it no longer shows the variables (API keys) it was started with
    proctitle.set_title(proctitle.orchestrator(opts.swarm.name))
    # before the fork server exists: children must not inherit systemd's NOTIFY_SOCKET
    notifier = systemd.Notifier.from_env(unset_environment=True)
    settings = Settings.from_policy(opts.swarm.spec.policy)
    paths = opts.layout.run_paths(opts.swarm.name)
    endpoints = (paths.agents_endpoint, paths.control_endpoint)  # raise before anything starts
    lock = rundir.acquire(paths, opts.swarm.name)
    logfile = logs.configure(
        opts.layout.orchestrator_log(opts.swarm.name),
        opts.log_format,
        quiet=opts.quiet,
        secrets=opts.bundle.secret_values,
        rotation=Rotation.of(opts.swarm.spec.observability.logs),
    )
    # where agents get cgroups with their limits: before the fork server, which is forked into it
    cgroup = cgroups.prepare()
    server = None
    if settings.spawn_mode is SpawnMode.FORKSERVER:
        launch = launch_settings(opts, settings, endpoints[0], cgroup)
        context = {"bundle": opts.bundle, "launch": launch}
        server = start_fork_server(
            ENTRY,
            close_fds=(lock.fileno(),),
            context=context,
            title=proctitle.fork_server(opts.swarm.name),
        )
    import uvloop

    try:
        return uvloop.run(Daemon(opts, settings, server, endpoints, notifier, cgroup).main())
    finally:
        runpointer.remove(opts.layout, opts.swarm.name)
        rundir.release(paths, lock)
        notifier.close()
        logfile.close()


class Daemon:
    def __init__(
        self,
        opts: DaemonOptions,
        settings: Settings,
        server: ForkServerProcess | None,
        endpoints: tuple[str, str],
        notifier: systemd.Notifier | None = None,
        cgroup: Path | None = None,
    ) -> None:
        self.notifier = notifier or systemd.Notifier(None)
        self.cgroup = cgroup
        """The parent of the agents' cgroups (`orchestrator/supervision/cgroups.py`), when there is
        one."""
        self.opts = opts
        self.settings = settings
        self.server = server
        self.endpoints = endpoints
        self.paths = opts.layout.run_paths(opts.swarm.name)
        self.events: asyncio.Queue[str] = asyncio.Queue()
        self.exit_code = 0

    def request_stop(self, why: str = "stop") -> None:
        self.events.put_nowait(why)

    def _spawner(self) -> Spawner:
        rotation = Rotation.of(self.opts.swarm.spec.observability.logs)
        cold = ColdSpawner(CHILD_MODULE, outputs=ChildOutputs(rotation), cgroup=self.cgroup)
        if self.server is None:
            return cold
        return ForkServerSpawner(self.server, cold)

    def _info(self) -> OrchestratorInfo:
        return OrchestratorInfo(
            pid=os.getpid(),
            swarm=self.opts.swarm.name,
            bundle=str(self.opts.bundle.path.resolve()),
            started_at=datetime.now(UTC).isoformat(timespec="seconds"),
            version=_version(),
            state_root=str(self.opts.layout.root),
            endpoints={"agents": self.endpoints[0], "control": self.endpoints[1]},
            node=self.opts.cluster.node if self.opts.cluster is not None else "",
        )

    async def _backends(self) -> Backends | None:
        """The metrics endpoint, then the embedded journal or (cluster mode) the node's NATS
        connection; None (logged) when one cannot start."""
        try:
            metrics = await start_metrics(self.opts.swarm.spec.observability.metrics)
        except MetricsUnavailable as exc:
            log.error("metrics_unavailable", code=exc.code, reason=exc.message,
                      suggestion=exc.suggestion)  # fmt: skip
            return None
        if self.opts.cluster is None:
            return metrics, await self._journal(), None
        link: NodeLink | None = None
        try:
            link = await self._join(self.opts.cluster)
        finally:
            if link is None and metrics is not None:
                metrics.close()  # refused, or the start was stopped meanwhile
        return (metrics, None, link) if link is not None else None

    async def _unless_stopped(
        self, opening: Coroutine[Any, Any, Backends | None]
    ) -> Backends | None:
        """What `opening` returns, or None when a stop (SIGTERM, Ctrl-C) comes first: a node
        waiting for NATS at its start stops when asked, as a running daemon does."""
        work = asyncio.ensure_future(opening)
        stop = asyncio.ensure_future(self.events.get())
        await asyncio.wait({work, stop}, return_when=asyncio.FIRST_COMPLETED)
        if work.done():
            stop.cancel()
            return work.result()
        work.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await work
        log.warning("start_interrupted", reason=stop.result())
        return None

    async def _journal(self) -> SqliteJournal | None:
        """The embedded journal unless it is off; raises JournalError (nothing is accepted on
        a bad journal)."""
        if not self.settings.journal:
            return None
        return await SqliteJournal.open(self.opts.layout.journal_file(self.opts.swarm.name))

    async def _join(self, cluster: ClusterOptions) -> NodeLink | None:
        """Connect to NATS as a node of this swarm (the only import of nats-py)."""
        try:
            from orchestrator.cluster.link import ClusterUnavailable
            from orchestrator.cluster.nodelink import NodeLink
        except ImportError as exc:
            log.error("cluster_unavailable", code="E_CLUSTER_CONFIG", reason=str(exc),
                      suggestion="pip install 'goondan-daemon[cluster]'")  # fmt: skip
            return None
        try:
            return await NodeLink.open(cluster, self.opts.swarm.name)
        except ClusterUnavailable as exc:
            log.error("cluster_unavailable", code=exc.code, reason=exc.message,
                      suggestion=exc.suggestion)  # fmt: skip
            return None

    async def main(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.events.put_nowait, signal.Signals(sig).name)
        opened = await self._unless_stopped(self._backends())
        if opened is None:
            return 1
        metrics, journal, link = opened
        spawner = self._spawner()
        # an orphan of an agent (its tool killed its parent) stays under us, and the control
        # socket sees it as ours (orchestrator/supervision/orphans.py); the sweep reaps what we
        # adopt
        orphans.become_subreaper()
        zctx = zmq.asyncio.Context()
        launch = launch_settings(self.opts, self.settings, self.endpoints[0], self.cgroup)
        wiring = Wiring(self.opts, self.settings, self.endpoints, launch, self.server,
                        self.notifier)  # fmt: skip
        parts = wiring.build(zctx, spawner, journal, metrics, link)
        node = parts.cluster
        router, supervisor = parts.router, parts.supervisor
        self._start_connectors(parts)
        parts.deferred.resume_answered()  # answered calls an earlier daemon died before resuming
        swarm = self.opts.swarm
        info = self._info()
        control_ctx = ControlContext(
            router=router,
            supervisor=supervisor,
            info=info,
            layout=self.opts.layout,
            swarm=parts.swarm,
            request_stop=self.request_stop,
            reload=parts.reloader.answer,
            deferred=parts.deferred,
            acceptor=parts.ingress,
            permits=parts.permits,
            stopped=loop.create_future(),
            scope=parts.scope,
        )
        control = ControlServer(zctx, self.endpoints[1], control_ctx,
                                rundir.write_token(self.paths),
                                agents_cgroup=control_fence.agents_cgroup(self.cgroup))  # fmt: skip
        rundir.secure_socket(self.paths.control_sock)
        # scrapes are answered from here on, reading what was just built
        served = (
            await metrics.serve(router, parts.ingress, control, journal.stats if journal else None)
            if metrics is not None
            else None
        )
        rundir.write_active(self.paths, info)
        runpointer.write(self.opts.layout, swarm.name)
        tasks = [
            self._core(router.run(), "router"),
            self._core(control.run(), "control"),
            self._core(Reconciler(supervisor, self.settings).run(), "reconciler"),
            self._core(parts.ingress.compact_forever(), "journal"),
            self._core(orphans.reap_forever(), "orphans"),
        ]
        if node is not None:
            tasks.append(self._core(node.run(parts.deferred.handle), "cluster"))
        if journal is not None:  # a failed writer thread stops the daemon (E_JOURNAL_FAILED)
            tasks.append(self._core(journal.watch(), "journal writer"))
        tasks.append(self._notify_systemd(supervisor, list(tasks)))
        tasks += [
            self._core(c, "reload") for c in reload.serve(parts.reloader, watch=self.opts.watch)
        ]
        if self.opts.on_started is not None:
            tasks.append(asyncio.ensure_future(self._once(self.opts.on_started(control_ctx))))
        members = sorted(supervisor.swarm.view.members)
        log.info("started", swarm=swarm.name, pid=info.pid, spawner=spawner.mode,
                 agents=members, control=self.endpoints[1],
                 node=node.node if node is not None else None)  # fmt: skip
        # what an earlier daemon accepted and did not finish; a task: a stuck journal must not
        # keep this loop from reading a SIGTERM
        tasks.append(self._core(parts.ingress.recover(), "recover"))
        why = await self.events.get()
        report = await self._shutdown(supervisor, why, node)
        assert control_ctx.stopped is not None
        control_ctx.stopped.set_result(report)
        await control.finish(limit=1.0)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        control.close()
        if served is not None:
            served.close()
        if metrics is not None:
            metrics.close()
        router.close()
        zctx.term()
        await spawner.close()
        orphans.kill_strays()  # what a tool left under us must not outlive this daemon
        parts.permits.close()  # today's usage tallies to disk (and to the journal's copy)
        await self._close_journal(parts.ingress)
        if node is not None:
            await node.close()
        log.info("stopped", exit_code=self.exit_code)
        return self.exit_code

    def _start_connectors(self, parts: Parts) -> None:
        """Connectors are always up (ARCHITECTURE.md §5), but for a daemon started for one
        purpose (`run --input`, `eval`): its inputs come through the control context. One that
        cannot start at the daemon's start (its token unset, its port taken) stops the daemon
        with exit 2: retrying every second would only hide a configuration error. Later
        failures keep the crash policy's backoff."""
        if self.opts.on_started is not None:
            return
        first = set(parts.swarm.view.connections)

        def refused(entry: ProcessEntry, error: ErrorInfo) -> None:
            if entry.address not in first or entry.generation != 1:
                return
            log.error("connection_cannot_start", connection=entry.address.name,
                      code=error.code, reason=error.message, suggestion=error.suggestion or
                      "fix the Connection's config, then run again")  # fmt: skip
            self.exit_code = EXIT_USAGE
            self.request_stop(f"Connection {entry.address.name} cannot start")

        parts.supervisor.add_start_error_listener(refused)
        parts.connections.start_all()

    async def _close_journal(self, ingress: Ingress) -> None:
        """Bounded: a wedged journal thread must not keep the daemon from exiting (exit 1)."""
        try:
            async with asyncio.timeout(JOURNAL_CLOSE_LIMIT):
                await ingress.close()
        except TimeoutError:
            log.error("journal_not_closed", code=ErrorCode.E_JOURNAL_FAILED,
                      seconds=JOURNAL_CLOSE_LIMIT)  # fmt: skip
            self.exit_code = 1

    def _notify_systemd(self, supervisor: Supervisor, core: list[asyncio.Future[Any]]) -> Any:
        """READY now (bundle loaded, sockets bound); WATCHDOG while no core task has ended
        (and the loop turns, or this task could not run); RELOADING/READY around restarts."""
        notifier, swarm = self.notifier, self.opts.swarm.name

        def status() -> str:
            return systemd.status_text(swarm, (e.status for e in supervisor.table))

        notifier.ready(status())
        supervisor.add_restart_listener(systemd.RestartNotices(notifier, status))

        def alive() -> bool:
            return not any(t.done() for t in core)

        return self._core(systemd.watchdog_loop(notifier, alive, status=status), "watchdog")

    def _core(self, coro: Awaitable[Any], name: str) -> asyncio.Future[Any]:
        task = asyncio.ensure_future(coro)

        def done(fut: asyncio.Future[Any]) -> None:
            if not fut.cancelled() and fut.exception() is not None:
                log.error("task_failed", task=name, error=repr(fut.exception()))
                self.exit_code = 1
                self.request_stop(f"{name} failed")

        task.add_done_callback(done)
        return task

    async def _once(self, coro: Awaitable[int]) -> None:
        try:
            self.exit_code = await coro
        finally:
            self.request_stop("one-shot input answered")

    async def _shutdown(
        self, supervisor: Supervisor, why: str, node: ClusterNode | None = None
    ) -> StopReport:
        started = time.monotonic()
        if node is not None:  # hand the partitions over now, not after the lease TTL
            await node.leave()
        self.notifier.stopping(f"stopping: {why}")
        live = len(supervisor.table.live())
        log.info("stopping", reason=why, children=live)
        if why == "SIGINT" and live and sys.stderr.isatty():
            grace = self.settings.grace_period
            sys.stderr.write(f"goondan: draining {live} process(es), up to {grace:g} s; Ctrl-C "
                             "again to force\n")  # fmt: skip
            sys.stderr.flush()
        drain = asyncio.ensure_future(supervisor.shutdown_all())
        second = asyncio.ensure_future(self.events.get())
        done, _ = await asyncio.wait({drain, second}, return_when=asyncio.FIRST_COMPLETED)
        report = StopReport()
        if second in done:
            log.warning("forced_stop", reason=second.result())
            supervisor.kill_all()
            self.exit_code = self.exit_code or 1
            try:
                async with asyncio.timeout(5.0):
                    report = await drain
            except TimeoutError:
                log.error("children_not_reaped", live=len(supervisor.table.live()))
        else:
            second.cancel()
            report = drain.result()
        log.info("drained", seconds=round(time.monotonic() - started, 3), drained=report.drained,
                 killed=report.killed, kept=report.kept, dropped=report.dropped)  # fmt: skip
        return report
