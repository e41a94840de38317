"""The daemon's view of its swarm, derived from the bundle, and the one holder it is read from.

Everything a reload may change about the swarm the daemon serves (its member agents, the
agents the bundle declares, the entry agent, the default instance key, its Connections) is one
frozen `SwarmView`. A reload builds the new view and swaps it into the `CurrentSwarm` holder in
one step; the supervisor, the `agents` tool, the connections and the control server read
`current.view` each time they need it, so no part keeps a copy that a reload could miss.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from bundles.kinds import Kind, SwarmSpec
from bundles.model import Bundle, Resource
from bundles.refs import connection_connector, connection_swarm, entry_agent, swarm_agents
from orchestrator.swarm import rules as ingress
from protocol.ids import Address, ProcessKind


@dataclass(frozen=True, slots=True)
class Connection:
    name: str
    connector: str
    address: Address
    ingress: ingress.Ingress
    approvers: frozenset[str] = frozenset()
    """`config.approvers`: who may decide an approval through this Connection (a chat user
    id or name, an API token's name; orchestrator/calls/auth.py)."""


def approver_names(raw: object) -> frozenset[str]:
    """`config.approvers` as written: a comma-separated string or a list of strings (names are
    not secrets: a value read from elsewhere names no one)."""
    items = raw if isinstance(raw, list) else raw.split(",") if isinstance(raw, str) else []
    return frozenset(str(item).strip() for item in items if isinstance(item, str) and item.strip())


def swarm_connections(bundle: Bundle, swarm: Resource[SwarmSpec]) -> list[Connection]:
    """Every Connection of the bundle whose swarm is `swarm` (refs were checked at load)."""
    found = []
    for res in bundle.of_kind(Kind.CONNECTION):
        if connection_swarm(bundle, res).name != swarm.name:
            continue
        connector_res = connection_connector(bundle, res)
        connector = connector_res.name
        address = Address(kind=ProcessKind.CONNECTOR, name=res.name, instance_key=connector)
        defaults = connector_res.spec.config.get("approvers")
        approvers = approver_names(res.spec.config.get("approvers", defaults))
        compiled = ingress.compile_connection(bundle, res)
        found.append(Connection(res.name, connector, address, compiled, approvers))
    return found


def _no_connections() -> Mapping[Address, Connection]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class SwarmView:
    name: str
    entry_agent: str
    default_instance_key: str
    """`Swarm.spec.instanceKey`, else the swarm's name."""
    members: tuple[str, ...]
    """The Swarm's agents, in `spec.agents` order."""
    declared: frozenset[str] = frozenset()
    """Every Agent resource of the bundle (in the Swarm or not)."""
    connections: Mapping[Address, Connection] = field(default_factory=_no_connections)
    """The swarm's Connections by the address of their connector process."""

    @classmethod
    def of(cls, bundle: Bundle, swarm: Resource[SwarmSpec]) -> SwarmView:
        connections = {c.address: c for c in swarm_connections(bundle, swarm)}
        return cls(
            name=swarm.name,
            entry_agent=entry_agent(bundle, swarm).name,
            default_instance_key=swarm.spec.instance_key or swarm.name,
            members=tuple(a.name for a in swarm_agents(bundle, swarm)),
            declared=frozenset(a.name for a in bundle.of_kind(Kind.AGENT)),
            connections=MappingProxyType(connections),
        )


class CurrentSwarm:
    """The one holder of the current `SwarmView`; `swap` replaces the whole view at once."""

    __slots__ = ("_view",)

    def __init__(self, view: SwarmView) -> None:
        self._view = view

    @property
    def view(self) -> SwarmView:
        return self._view

    def swap(self, view: SwarmView) -> None:
        self._view = view
