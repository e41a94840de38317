"""The `Ingress` without a journal (`Swarm.spec.policy.ingress.journal: off`): an event is
submitted the moment it is accepted, and nothing survives the daemon
(docs/guides/reliability.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from orchestrator.ingress.accept import Submit
from orchestrator.ingress.journal import Appended
from orchestrator.ingress.port import Attached
from protocol.errors import ErrorInfo
from protocol.events import AgentEvent
from protocol.ids import Address


class DirectIngress:
    def __init__(self, submit: Submit) -> None:
        self._submit = submit

    async def accept(
        self,
        event: AgentEvent,
        target: Address,
        *,
        waiter: asyncio.Future[AgentEvent] | None = None,
        dedupe_key: str | None = None,
    ) -> Appended | None:
        self._submit(event, target, waiter)
        return None

    def take(
        self, event: AgentEvent, target: Address, answered: Callable[[ErrorInfo | None], None]
    ) -> None:
        self._submit(event, target, None)
        answered(None)

    def started(self, event_id: str) -> None:
        return None

    def finished(self, event_id: str, reply: AgentEvent | None = None) -> None:
        return None

    def keep(self, event_id: str, reply: AgentEvent) -> bool:
        return False  # nothing is kept for the next start: the stop answers it

    async def attach(self, event_id: str) -> Attached | None:
        return None

    async def recover(self) -> int:
        return 0

    async def pending_targets(self) -> list[str]:
        return []

    @property
    def lag(self) -> tuple[int, int]:
        return 0, 0

    async def compact_forever(self) -> None:
        # nothing stored, but a core task of the daemon: one that ended would tell its
        # watchdog the daemon is stuck (orchestrator/daemon.py `_notify_systemd`)
        await asyncio.Event().wait()

    async def close(self) -> None:
        return None
