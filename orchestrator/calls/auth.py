"""Who may answer a deferred call (ARCHITECTURE.md §10).

An answer's author is what goondan knows of where it came from, never what the answer says:
- the control socket (`goondan calls`, Studio): an operator, recorded as the OS user of the
  peer (SO_PEERCRED), `via` cli or studio. An operator may answer any call.
- a connector process (the router knows which one sent the frame): `via` is
  `connector:<Connection>`, `by` the principal the connector authenticated (`ANSWERED_BY`: the
  chat user on the Connection's `approvers` who pressed, the API token's name), and, when the
  connector says so (the `api` connector always does), the agent instance its client
  addresses.

A `goondan.approve` call is decided only by an operator or by a principal the Connection
lists in `config.approvers`; any other client-side call is answered only through the
Connection that received it (and, when the answer names one, for the instance the call
belongs to). Everything else is E_CALL_FORBIDDEN.
"""

from __future__ import annotations

import pwd
from collections.abc import Mapping
from dataclasses import dataclass

from protocol.errors import ProtocolError
from protocol.events import AgentEvent
from protocol.ids import Address, ProcessKind, agent_address, parse_address
from protocol.jsonrpc import (
    ANSWERED_BY,
    APPROVE_METHOD,
    JsonRpcResponse,
    PendingCall,
    approval_answer,
)


@dataclass(frozen=True, slots=True)
class Answerer:
    via: str
    """`cli`, `studio` or `connector:<Connection>`."""
    by: str
    """The OS user of an operator; the principal a connector authenticated ("" if none)."""
    connector: Address | None = None
    """The connector process the answer came from (None: the control socket)."""
    instance: Address | None = None
    """The agent instance the connector's client addresses (None: not said)."""
    approvers: frozenset[str] = frozenset()
    """The Connection's `config.approvers`."""


def os_user(uid: int | None) -> str:
    """The name of `uid` (`uid:<n>` when it has none in the password database)."""
    if uid is None:
        return "unknown"
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid:{uid}"


def operator(via: str, uid: int | None) -> Answerer:
    return Answerer(via=via, by=os_user(uid))


def from_connector(connector: Address, event: AgentEvent, to: str,
                   approvers: frozenset[str]) -> Answerer:  # fmt: skip
    """The author of a connector's `deferred.answer` event; `to` is the frame's address (an
    agent instance when the connector addressed one)."""
    principal = event.metadata.get(ANSWERED_BY)
    return Answerer(
        via=f"{ProcessKind.CONNECTOR}:{connector.name}",
        by=principal if isinstance(principal, str) else "",
        connector=connector,
        instance=_agent(to),
        approvers=approvers,
    )


def refusal(call: PendingCall, who: Answerer) -> str | None:
    """Why `who` may not answer `call` (None: it may)."""
    if who.connector is None:
        return None
    target = agent_address(call.agent, call.instance_key)
    if who.instance is not None and who.instance != target:
        return (f"call {call.id} belongs to {target}, not to {who.instance}, the instance this "
                "answer was sent for")  # fmt: skip
    if call.method == APPROVE_METHOD:
        if who.by and who.by in who.approvers:
            return None
        listed = f"{who.by!r} is not" if who.by else "the answer names no principal that is"
        return (f"call {call.id} is an approval: only `goondan calls approve|deny`, Studio, or a "
                f"principal in Connection {who.connector.name!r}'s config.approvers may decide "
                f"it, and {listed} one")  # fmt: skip
    origin = _origin(call.event)
    if origin != who.connector:
        came = f"Connection {origin.name!r}" if origin is not None else "a control client"
        return (f"call {call.id} came from {came}: only it, `goondan calls resolve` or Studio "
                "may answer it")  # fmt: skip
    return None


def decision(
    call: PendingCall, answer: JsonRpcResponse, who: Answerer, at: float
) -> JsonRpcResponse:
    """A client's answer to an approval as goondan's decision record: approved or not, and
    its message, from the answer; who and how from `who`, never from the answer."""
    result, error = answer.result, answer.error
    given = result if isinstance(result, dict) else {}
    approved = error is None and (result is True or given.get("approved") is True)
    message = error.message if error is not None else given.get("message")
    return approval_answer(call.id, approved=approved, by=who.by, via=who.via, at=at,
                           message=str(message) if message else None)  # fmt: skip


def _origin(event: Mapping[str, object]) -> Address | None:
    reply_to = event.get("replyTo")
    target = reply_to.get("target") if isinstance(reply_to, dict) else None
    address = _address(target) if isinstance(target, str) else None
    return address if address is not None and address.kind is ProcessKind.CONNECTOR else None


def _agent(to: str) -> Address | None:
    address = _address(to)
    return address if address is not None and address.kind is ProcessKind.AGENT else None


def _address(text: str) -> Address | None:
    try:
        return parse_address(text)
    except ProtocolError:
        return None
