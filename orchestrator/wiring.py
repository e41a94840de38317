"""The daemon's object graph, built once, in one pass (ARCHITECTURE.md §5).

`orchestrator/daemon.py` opens what the graph stands on (the fork server, the metrics endpoint,
the journal or the cluster node) and runs the graph; this module builds it. The ports are
chosen here, once: the `Ingress` (journal, none, or the cluster's stream) and the `Placement`
(this machine, or the node that leases an instance); the core calls them and never asks which
mode it runs in. Mailboxes and the request book come first and go to both the router and the
supervisor; whoever is built before the router reaches it through one `Relay`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import structlog
import zmq.asyncio

from bundles.kinds import SwarmSpec
from bundles.model import Bundle, Resource
from orchestrator import systemd
from orchestrator.calls.agent_send import SendCalls
from orchestrator.calls.agents import AGENT_OPS, AgentsService
from orchestrator.calls.budgets import Budgets
from orchestrator.calls.deferred import DEFERRED_OPS, DeferredIndex
from orchestrator.calls.deferred_remote import NO_MIRROR
from orchestrator.calls.permits import PERMIT_OPS, Permits
from orchestrator.calls.ratelimits import RateLimits
from orchestrator.calls.self_restart import SelfRestart
from orchestrator.cluster.options import ClusterOptions
from orchestrator.control import rundir
from orchestrator.control.scope import SwarmScope, ThisMachine
from orchestrator.control.server import ControlContext
from orchestrator.ingress.accept import Acceptor
from orchestrator.ingress.connections import Connections
from orchestrator.ingress.direct import DirectIngress
from orchestrator.ingress.journal.sqlite import SqliteJournal
from orchestrator.ingress.port import Ingress
from orchestrator.observe.endpoint import Metrics
from orchestrator.reload.apply import BundleSource, Reloader
from orchestrator.routing.broker import Broker, CallHandler
from orchestrator.routing.placement import LocalPlacement
from orchestrator.routing.relay import Relay
from orchestrator.routing.router import Collaborators, Router
from orchestrator.routing.wire import RouterSocket
from orchestrator.supervision import forkserver
from orchestrator.supervision.forkserver import ENTRY, ForkServerProcess
from orchestrator.supervision.mailboxes import Mailboxes, RequestBook
from orchestrator.supervision.ports import Placement
from orchestrator.supervision.settings import Settings
from orchestrator.supervision.spawner import Spawner
from orchestrator.supervision.states import ProcessStatus
from orchestrator.supervision.supervisor import Supervisor
from orchestrator.supervision.table import ProcessEntry, ProcessTable, TransitionListener
from orchestrator.swarm.view import CurrentSwarm, SwarmView
from protocol.endpoints import StateLayout
from protocol.ids import Address
from protocol.launch import LaunchSettings
from protocol.messages import CallOp, CallPayload, TurnMetrics

if TYPE_CHECKING:  # cluster mode's modules import nats-py: only a --cluster run loads them
    from orchestrator.cluster.node import ClusterNode
    from orchestrator.cluster.nodelink import NodeLink
    from orchestrator.cluster.placement import ClusterPlacement

log = structlog.get_logger("goondan.daemon")
OnStarted = Callable[[ControlContext], Awaitable[int]]
"""Run once everything is up (`run --input`, `eval`, `instance replay`); its return value is
the exit code. Such a daemon starts no connector: its inputs come through the control context,
and a Connection it does not need would only add start errors and processes."""


@dataclass(frozen=True, slots=True)
class DaemonOptions:
    bundle: Bundle
    swarm: Resource[SwarmSpec]
    layout: StateLayout
    env_files: tuple[Path, ...] = ()
    log_format: str = "console"
    quiet: bool = False
    on_started: OnStarted | None = None
    watch: bool = False
    """Reload the bundle when its files change (`run --watch`)."""
    cluster: ClusterOptions | None = None
    """`run --cluster URLS --node NAME`: this daemon is one node of the swarm's cluster."""


@dataclass(frozen=True, slots=True)
class Parts:
    """The daemon's object graph (`Daemon._build`)."""

    router: Router
    supervisor: Supervisor
    swarm: CurrentSwarm
    connections: Connections
    deferred: DeferredIndex
    reloader: Reloader
    ingress: Ingress
    permits: Permits
    scope: SwarmScope
    cluster: ClusterNode | None
    """This daemon as a node of the swarm's cluster (`run --cluster`), else None."""


class Wiring:
    """What the graph is built for: this run's options, settings, sockets and fork server."""

    def __init__(
        self,
        opts: DaemonOptions,
        settings: Settings,
        endpoints: tuple[str, str],
        launch: LaunchSettings,
        server: ForkServerProcess | None,
        notifier: systemd.Notifier,
    ) -> None:
        self.opts = opts
        self.settings = settings
        self.endpoints = endpoints
        self.agents_sock = opts.layout.run_paths(opts.swarm.name).agents_sock
        self.launch = launch
        self.server = server
        self.notifier = notifier

    def build(
        self,
        zctx: zmq.asyncio.Context,
        spawner: Spawner,
        journal: SqliteJournal | None,
        metrics: Metrics | None = None,
        link: NodeLink | None = None,
    ) -> Parts:
        """The object graph in one pass: the shared mailboxes and request book first, then the
        supervisor, the ingress and the call handlers (which reach the router through the
        relay), then the router, which takes them all."""
        opts = self.opts
        listener: TransitionListener = _log_transition
        if metrics is not None:
            listener = _both(_log_transition, metrics.registry.on_transition)
        table = ProcessTable(listener=listener)
        swarm = CurrentSwarm(SwarmView.of(opts.bundle, opts.swarm))
        mailboxes, book, relay = Mailboxes(), RequestBook(), Relay()
        wire = RouterSocket(zctx, self.endpoints[0], self.settings.max_frame_bytes)
        rundir.secure_socket(self.agents_sock)
        # the ports, chosen once: one machine or a cluster node; the journal or none
        seat = self._seat(link, table)
        placement: Placement = seat if seat is not None else LocalPlacement(relay.deliver_response)
        # the tools an agent declares are its only tool label values
        on_ready = metrics.registry.on_ready if metrics is not None else _quiet
        supervisor = Supervisor(table=table, mailboxes=mailboxes, deliveries=relay,
                                placement=placement, spawner=spawner, settings=self.settings,
                                launch=self.launch, layout=opts.layout, swarm=swarm,
                                ready_listener=on_ready)  # fmt: skip
        node = self._node(seat, supervisor, relay, mailboxes, book)
        ingress = self._ingress(relay, journal, node)
        connections = Connections(relay, swarm, supervisor.ensure, ingress,
                                  known=self._known(table))  # fmt: skip
        deferred = DeferredIndex(
            relay,
            supervisor,
            opts.layout,
            opts.swarm.name,
            view=swarm,
            mirror=seat.call_mirror if seat is not None else NO_MIRROR,
        )
        permits = self._permits(relay, journal)
        reloader = self._reloader(supervisor, swarm, connections.start_all, permits)
        agents = self._agents_service(table, supervisor)
        calls = _call_handlers(relay, agents, deferred, permits,
                               sends=SendCalls(agents, relay.accept, relay.reply),
                               restart=SelfRestart(reloader, relay))  # fmt: skip
        collaborators = Collaborators(
            lifecycle=supervisor, ingress=ingress, placement=placement, calls=calls,
            routes=agents, connectors=connections, suspended=deferred, budget=permits,
            turn_metrics=metrics.registry.on_turn_metrics if metrics is not None else _uncounted,
        )  # fmt: skip
        router = Router(wire, table, mailboxes, book, relay, collaborators)
        deferred.scan()  # pending calls of an earlier daemon (ARCHITECTURE.md §10)
        scope = self._scope(supervisor, node)
        return Parts(router, supervisor, swarm, connections, deferred, reloader, ingress, permits,
                     scope, node)  # fmt: skip

    def _scope(self, supervisor: Supervisor, node: ClusterNode | None) -> SwarmScope:
        """How far control requests see: this machine, or every node of the cluster."""
        if node is None:
            return ThisMachine(supervisor, self.opts.layout, self.opts.swarm.name)
        return node.control

    def _seat(self, link: NodeLink | None, table: ProcessTable) -> ClusterPlacement | None:
        """A cluster node's placement (instances run on the node that leases them); None on
        one machine, where every instance runs here."""
        if link is None:
            return None
        from orchestrator.cluster.placement import ClusterPlacement  # imports nats-py

        return ClusterPlacement(link, table, self.opts.layout)

    def _node(
        self,
        seat: ClusterPlacement | None,
        supervisor: Supervisor,
        relay: Relay,
        mailboxes: Mailboxes,
        book: RequestBook,
    ) -> ClusterNode | None:
        """The cluster node on its placement, once the supervisor it stops processes with
        exists."""
        if seat is None:
            return None
        from orchestrator.cluster.node import ClusterNode  # imports nats-py

        return ClusterNode(seat, supervisor, relay, mailboxes, book, self.opts.layout,
                           self.endpoints[1])  # fmt: skip

    @staticmethod
    def _ingress(relay: Relay, journal: SqliteJournal | None, node: ClusterNode | None) -> Ingress:
        """Where events are accepted: the cluster's ingress stream, the embedded journal, or
        (journal off) straight to the router."""
        if node is not None:
            return node.acceptor
        if journal is not None:
            return Acceptor(journal, relay.submit)
        return DirectIngress(relay.submit)

    def _permits(self, broker: Broker, journal: SqliteJournal | None) -> Permits:
        """Budgets (today's tallies from disk, or the journal's copy) and the Models' shared
        rate limits."""
        swarm = self.opts.swarm.name
        budgets = Budgets(self.opts.layout.usage_file(swarm), swarm, copy=journal)
        budgets.load()
        permits = Permits(broker, budgets, RateLimits())
        permits.configure(self.opts.bundle, swarm)
        return permits

    def _known(self, table: ProcessTable) -> Callable[[Address], bool]:
        """Whether an instance exists: a process in the table, or its state on disk."""
        swarm, layout = self.opts.swarm.name, self.opts.layout

        def known(target: Address) -> bool:
            entry = table.get(target)
            if entry is not None and entry.ever_started:
                return True
            return layout.instance_paths(swarm, target.instance_key, target.name).root.exists()

        return known

    def _agents_service(self, table: ProcessTable, supervisor: Supervisor) -> AgentsService:
        swarm, layout = self.opts.swarm, self.opts.layout
        return AgentsService(
            table=table,
            swarm=supervisor.swarm,
            instance_root=lambda t: layout.instance_paths(swarm.name, t.instance_key, t.name).root,
            ensure=supervisor.ensure,
            allowed_roots=self.settings.spawn_roots,
        )

    def _reloader(
        self,
        supervisor: Supervisor,
        swarm: CurrentSwarm,
        start_connectors: Callable[[], None],
        permits: Permits,
    ) -> Reloader:
        """SIGHUP, the Reload request, --watch and self-restart: re-read the bundle, swap the
        swarm view, restart what changed, then start the connectors of new Connections."""
        opts, server = self.opts, self.server
        source = BundleSource(opts.bundle.path, opts.env_files, opts.layout.root, opts.swarm.name)

        def on_swap() -> None:
            permits.configure(reloader.current.bundle, opts.swarm.name)  # budgets, rate limits
            if server is not None:  # the fork server holds the new bundle for new children
                forkserver.call_hook(server, ENTRY, "refresh")

        reloader = Reloader(source, opts.bundle, supervisor, swarm, notifier=self.notifier,
                            on_swap=on_swap, after_restart=start_connectors)  # fmt: skip
        return reloader


def _call_handlers(
    broker: Broker,
    agents: AgentsService,
    deferred: DeferredIndex,
    permits: Permits,
    *,
    sends: SendCalls,
    restart: SelfRestart,
) -> dict[CallOp, CallHandler]:
    """Who answers each `call` op of a child (ARCHITECTURE.md §4)."""

    def agents_call(entry: ProcessEntry, payload: CallPayload) -> None:
        broker.reply(entry, agents.answer(entry.address, payload))

    handlers: dict[CallOp, CallHandler] = dict.fromkeys(AGENT_OPS, agents_call)
    handlers |= dict.fromkeys(DEFERRED_OPS, deferred.on_call)
    handlers |= dict.fromkeys(PERMIT_OPS, permits.on_call)
    handlers[CallOp.SEND] = sends.on_call
    handlers[CallOp.RESTART] = restart.on_call
    return handlers


def _quiet(entry: ProcessEntry, tools: list[str]) -> None:
    """No metrics endpoint: the tools a process declares are not counted."""


def _uncounted(entry: ProcessEntry, report: TurnMetrics) -> None:
    """No metrics endpoint: a turn's counter deltas are not counted."""


def _both(*listeners: TransitionListener) -> TransitionListener:
    def each(entry: ProcessEntry, source: ProcessStatus, target: ProcessStatus) -> None:
        for listener in listeners:
            listener(entry, source, target)

    return each


def _log_transition(entry: ProcessEntry, source: ProcessStatus, target: ProcessStatus) -> None:
    log.info("transition", process=str(entry.process_id), source=str(source), target=str(target))
