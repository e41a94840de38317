"""What the deferred-call index needs from a cluster (ARCHITECTURE.md §10, §15): the calls it
keeps beyond this node, and answers handed to the node that runs a call's instance.

On one machine the index's mirror is `NO_MIRROR`: every call is this node's. In cluster mode a
pending call is in the swarm's `calls` bucket before any client hears of it, so `goondan calls
list` on any node lists every call of the swarm, and `calls resolve|approve|deny` (or a
connector's `/rpc`) on a node that does not run the call's instance is forwarded, as a
`Forward`, to the node that does, which answers it as if it had been asked itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import msgspec

from protocol.jsonrpc import JsonRpcResponse, PendingCall


class Forward(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """An answer to a call another node runs: a resolution (`answer`) or an approval
    decision (`approve`), and how the asking client waits."""

    call_id: str
    agent: str
    instance_key: str
    wait_s: float
    via: str
    answer: JsonRpcResponse | None = None
    approve: bool | None = None
    by: str = ""
    message: str | None = None
    wait: bool = False


class CallMirror(Protocol):
    """Cluster mode: where pending calls are kept beyond this node (orchestrator/cluster/)."""

    def pending(self, call: PendingCall, then: Callable[[], None]) -> None:
        """Keep `call`, then run `then` (announce it): a client never hears of a call that
        another node could not resume."""

    def answered(self, call: PendingCall) -> None: ...

    async def swarm_calls(self) -> list[PendingCall]:
        """Every call pending anywhere in the swarm (expired ones included)."""
        ...

    async def locate(self, call_id: str) -> PendingCall | None:
        """The call when another node runs its instance; None when no node has it or this
        one runs it (its files are then written here first, so the index finds it)."""
        ...

    async def forward(self, call: PendingCall, forward: Forward) -> Any:
        """Have the node running the call's instance answer it: what its index returned,
        or DeferredCallError with that node's code."""
        ...


class _NoMirror:
    """One machine: every call is this node's, kept in its files only."""

    def pending(self, call: PendingCall, then: Callable[[], None]) -> None:
        then()

    def answered(self, call: PendingCall) -> None:
        return None

    async def swarm_calls(self) -> list[PendingCall]:
        return []

    async def locate(self, call_id: str) -> PendingCall | None:
        return None

    async def forward(self, call: PendingCall, forward: Forward) -> Any:
        raise AssertionError("one machine locates no call elsewhere: nothing is forwarded")


NO_MIRROR: CallMirror = _NoMirror()
