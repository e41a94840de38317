"""Starting the daemon's metrics endpoint when the Swarm asks for it (ARCHITECTURE.md §13).

Kept apart from `orchestrator.observe.metrics` so the daemon imports prometheus_client only when
`Swarm.spec.observability.metrics` is set; without the package that setting is a coded error
that says what to install, not an ImportError.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bundles.kinds import MetricsEndpoint
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from orchestrator.control.server import ControlServer
    from orchestrator.ingress.port import Ingress
    from orchestrator.observe.metrics import DaemonMetrics
    from orchestrator.routing.router import Router


class MetricsUnavailable(Exception):
    def __init__(self, message: str, suggestion: str) -> None:
        super().__init__(message)
        self.code = ErrorCode.E_METRICS_UNAVAILABLE
        self.message = message
        self.suggestion = suggestion


@dataclass(slots=True)
class Metrics:
    """The endpoint: its counters from the start (the daemon's objects report to them), its
    socket listening; scrapes are answered once `serve` has those objects to read."""

    registry: DaemonMetrics
    sock: socket.socket

    async def serve(
        self,
        router: Router,
        acceptor: Ingress,
        control: ControlServer,
        journal_stats: Callable[[], Awaitable[dict[str, Any]]] | None,
    ) -> asyncio.Server:
        """Answer scrapes from now on, reading the running daemon at each one."""
        from orchestrator.observe import metrics_http
        from orchestrator.observe.metrics import LiveView, Scrape

        def mailboxes() -> list[tuple[str, int, int]]:
            return [(a.name, len(b.queue), len(b.inflight)) for a, b in router.mailboxes.items()]

        def dropped() -> list[tuple[str, str, int]]:
            stats = router.stats
            return [
                ("agents", "malformed", stats.malformed),
                ("agents", "stale", stats.stale),
                ("agents", "undeliverable", stats.undeliverable),
                ("agents", "peer_closed", router.peers.dropped),
                ("control", "malformed", control.dropped),
                ("control", "peer_closed", control.peers.dropped),
            ]

        view = LiveView(entries=lambda: router.table, mailboxes=mailboxes,
                        journal=lambda: acceptor.lag, dropped=dropped,
                        journal_stats=journal_stats)  # fmt: skip
        return await metrics_http.serve(Scrape(self.registry, view), self.sock)

    def close(self) -> None:
        self.sock.close()


async def start_metrics(endpoint: MetricsEndpoint | None) -> Metrics | None:
    """Listening when it returns, answering once `Metrics.serve` is called (None when not
    configured); raises MetricsUnavailable."""
    if endpoint is None:
        return None
    try:
        from orchestrator.observe import metrics, metrics_http
    except ImportError as exc:
        raise MetricsUnavailable(
            f"Swarm.spec.observability.metrics is set but {exc.name} is not installed",
            "pip install 'goondan-daemon[metrics]', or remove observability.metrics",
        ) from exc
    registry = metrics.DaemonMetrics()
    host, port = endpoint.host, endpoint.port
    try:
        return Metrics(registry, metrics_http.listen(host, port))
    except OSError as exc:
        raise MetricsUnavailable(
            f"cannot listen on {host}:{port} for metrics: {exc.strerror or exc}",
            "choose another Swarm.spec.observability.metrics.port (0: any free port)",
        ) from exc
