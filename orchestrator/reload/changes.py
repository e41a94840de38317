"""Which processes a bundle edit affects: a pure function of the old and the new bundle.

A resource "changed" when its fingerprint (its document after overrides plus the contents of
its entry / systemRef / scriptFile, `bundles.files.fingerprint`) differs, or it was added or
removed. Then, for the swarm the daemon serves:

- Agent changed (YAML or its prompt file) -> that agent's processes;
- Tool / Extension changed (resource or entry file) -> the agents that use it (old or new
  bundle, so removing a tool from an agent restarts it too);
- Model changed -> the agents that use that Model. The issue says "Swarm/Model -> all", but a
  Model an agent does not reference cannot change that agent's behaviour, so the finer set is
  exactly as correct and restarts less;
- Swarm changed (ours) or the bundle's environment (.env values) changed -> every agent;
- Connection changed -> its connector process (one per Connection); Connector changed -> the
  connector processes of every Connection using it (reported even if none runs yet).

Agents and Connections that left the swarm are reported separately: their processes stop.
Other swarms' resources in the same bundle never affect this daemon.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from bundles.diagnostics import BundleError
from bundles.files import fingerprint
from bundles.kinds import Kind
from bundles.model import Bundle, Resource
from bundles.refs import (
    connection_connector,
    connection_swarm,
    resolve_extensions,
    resolve_model,
    resolve_tools,
    swarm_agents,
)


@dataclass(frozen=True, slots=True)
class ChangePlan:
    changed: tuple[str, ...]
    """Resource keys (`Kind/name`) added, removed or edited, sorted."""
    agents: frozenset[str] = frozenset()
    """Agents (still in the swarm) whose processes restart."""
    removed_agents: frozenset[str] = frozenset()
    """Agents no longer in the swarm: their processes stop."""
    connections: frozenset[str] = frozenset()
    """Connections (of this swarm) whose connector process restarts."""
    removed_connections: frozenset[str] = frozenset()
    why: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """agent or `connection:<name>` -> the changed keys that caused it."""

    @property
    def empty(self) -> bool:
        return not (
            self.agents or self.removed_agents or self.connections or self.removed_connections
        )


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A loaded bundle with its resources' fingerprints taken right after loading: the files
    are read again later only to compare, so the old contents must be digested before the
    edit (a later digest of the old bundle would already see the new file)."""

    bundle: Bundle
    prints: dict[str, str]


def snapshot(bundle: Bundle) -> Snapshot:
    return Snapshot(bundle, {res.key: fingerprint(res) for res in bundle.resources})


def changed_keys(old: Snapshot, new: Snapshot) -> set[str]:
    before, after = old.prints, new.prints
    return {key for key in before.keys() | after.keys() if before.get(key) != after.get(key)}


def _agents(bundle: Bundle, swarm: str) -> list[Resource[Any]]:
    res = bundle.find(Kind.SWARM, swarm)
    return swarm_agents(bundle, res) if res is not None else []


def _dependencies(bundle: Bundle, agent: Resource[Any]) -> set[str]:
    """The keys whose change restarts `agent`: itself, its tools, extensions and model."""
    keys = {agent.key}
    try:
        keys.update(t.key for t in resolve_tools(bundle, agent))
        keys.update(e.key for e in resolve_extensions(bundle, agent))
        keys.add(resolve_model(bundle, agent).key)
    except BundleError:  # cannot happen after a valid load; be conservative if it does
        keys.add("*")
    return keys


def _dependency_map(bundle: Bundle, swarm: str) -> dict[str, set[str]]:
    return {a.name: _dependencies(bundle, a) for a in _agents(bundle, swarm)}


def _connections(bundle: Bundle, swarm: str) -> dict[str, set[str]]:
    """Connection name -> the keys whose change restarts its connector process."""
    out: dict[str, set[str]] = {}
    for conn in bundle.connections():
        try:
            if connection_swarm(bundle, conn).name != swarm:
                continue
            out[conn.name] = {conn.key, connection_connector(bundle, conn).key}
        except BundleError:
            out[conn.name] = {conn.key, "*"}
    return out


def _affected(
    old: dict[str, set[str]], new: dict[str, set[str]], changed: set[str], everything: bool
) -> dict[str, tuple[str, ...]]:
    why: dict[str, tuple[str, ...]] = {}
    for name, deps in new.items():
        deps = deps | old.get(name, set())
        hits = sorted(deps & changed) if "*" not in deps else sorted(changed)
        if everything or hits:
            why[name] = tuple(hits) or ("*",)
    return why


def plan_changes(before: Snapshot, after: Snapshot, swarm: str) -> ChangePlan:
    """What to restart in the daemon serving `swarm` when `before` is replaced by `after`."""
    changed = changed_keys(before, after)
    old, new = before.bundle, after.bundle
    everything = f"{Kind.SWARM}/{swarm}" in changed or old.env != new.env
    if old.env != new.env:
        changed.add("env")
    old_agents, new_agents = _dependency_map(old, swarm), _dependency_map(new, swarm)
    agent_why = _affected(old_agents, new_agents, changed, everything)
    old_conn, new_conn = _connections(old, swarm), _connections(new, swarm)
    conn_why = _affected(old_conn, new_conn, changed, everything)
    why = dict(agent_why)
    why.update({f"connection:{name}": keys for name, keys in conn_why.items()})
    return ChangePlan(
        changed=tuple(sorted(changed)),
        agents=frozenset(agent_why),
        removed_agents=frozenset(old_agents.keys() - new_agents.keys()),
        connections=frozenset(conn_why),
        removed_connections=frozenset(old_conn.keys() - new_conn.keys()),
        why=why,
    )


def describe(plan: ChangePlan) -> dict[str, Iterable[str]]:
    """A log-friendly summary."""
    return {
        "changed": list(plan.changed),
        "agents": sorted(plan.agents),
        "removed_agents": sorted(plan.removed_agents),
        "connections": sorted(plan.connections),
        "removed_connections": sorted(plan.removed_connections),
    }
