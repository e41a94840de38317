"""The `Ingress` port: how an event is accepted, chosen once by the daemon at start
(ARCHITECTURE.md §5, §15).

Three implementations: `accept.Acceptor` (the embedded SQLite journal: durable before the
sender hears, recovered after a crash), `direct.DirectIngress` (`Swarm.spec.policy.ingress.
journal: off`: submitted at once, nothing survives the daemon) and, in cluster mode,
`orchestrator.cluster.accept.ClusterAcceptor` (the partition's ingress stream). The router
sees only its `Intake` half (orchestrator/routing/broker.py).
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from orchestrator.ingress.journal import Appended, JournalEntry
from orchestrator.routing.broker import Intake
from protocol.events import AgentEvent
from protocol.ids import Address

Attached = tuple[JournalEntry, "asyncio.Future[AgentEvent | None] | None"]
"""(the journal's entry, a future of its reply while its turn runs: None when done)"""


class Ingress(Intake, Protocol):
    async def accept(
        self,
        event: AgentEvent,
        target: Address,
        *,
        waiter: asyncio.Future[AgentEvent] | None = None,
        dedupe_key: str | None = None,
    ) -> Appended | None:
        """Durable when it returns (None: nothing is kept); `duplicate` when `dedupe_key`
        was seen within its window (then nothing is submitted). Raises JournalError."""
        ...

    async def attach(self, event_id: str) -> Attached | None:
        """For a client that re-attaches to an event it sent; None when it is not known."""
        ...

    async def recover(self) -> int:
        """Submit again what an earlier daemon accepted and did not finish."""
        ...

    async def pending_targets(self) -> list[str]:
        """The targets of accepted events whose turn has not finished (`goondan status`)."""
        ...

    @property
    def lag(self) -> tuple[int, int]:
        """(accepted events whose turn has not finished, events waiting for their append)."""
        ...

    async def compact_forever(self) -> None:
        """Keep what is stored bounded, while the daemon runs."""
        ...

    async def close(self) -> None: ...
