"""Connection ingress rules: a connector event -> (agent, instanceKey), pure (ARCHITECTURE.md §5).

The first rule whose `match` fits wins: `event` equal to the event's name (any when absent)
and every `properties` entry equal to the event's property at that (dotted) path. The
instance key is `instanceKeyPrefix` + the value at `instanceKeyProperty`, else the rule's
`instanceKey`, else the Swarm's (`Swarm.spec.instanceKey ?? metadata.name`). A Connection
without rules routes everything to the entry agent.

A connector may also address an agent itself (the `api` connector: the request names the model
= agent and the instance): `route_to` accepts that when the agent is one of the swarm's and,
if the Connection has rules, one of them fits the event and routes to that agent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bundles.kinds import ConnectionSpec, IngressRule, SwarmSpec
from bundles.model import Bundle, Resource
from bundles.refs import connection_swarm, entry_agent, route_agent, swarm_agents

_MISSING = object()


@dataclass(frozen=True, slots=True)
class CompiledRule:
    agent: str
    event: str | None = None
    properties: Mapping[str, Any] = field(default_factory=dict)
    instance_key: str | None = None
    key_property: str | None = None
    key_prefix: str = ""
    reply: bool = True


@dataclass(frozen=True, slots=True)
class Route:
    agent: str
    instance_key: str
    reply: bool
    rule: int
    """Index of the rule that matched (-1: the default route of a Connection without rules)."""


@dataclass(frozen=True, slots=True)
class Ingress:
    swarm: str
    entry_agent: str
    default_key: str
    rules: tuple[CompiledRule, ...] = ()
    new_per_minute: float | None = None
    agents: frozenset[str] = frozenset()
    """The swarm's agents: what a connector may address."""


def _compile(bundle: Bundle, rule: IngressRule, swarm: Resource[SwarmSpec]) -> CompiledRule:
    route = rule.route
    return CompiledRule(
        agent=route_agent(bundle, route, swarm).name,
        event=rule.match.event,
        properties=dict(rule.match.properties),
        instance_key=route.instance_key,
        key_property=route.instance_key_property,
        key_prefix=route.instance_key_prefix or "",
        reply=route.reply,
    )


def compile_connection(bundle: Bundle, connection: Resource[ConnectionSpec]) -> Ingress:
    """Resolve a Connection's rules once (refs are checked by the loader already)."""
    swarm = connection_swarm(bundle, connection)
    return Ingress(
        swarm=swarm.name,
        entry_agent=entry_agent(bundle, swarm).name,
        default_key=swarm.spec.instance_key or swarm.name,
        rules=tuple(_compile(bundle, r, swarm) for r in connection.spec.ingress.rules),
        new_per_minute=connection.spec.ingress.new_instances_per_minute,
        agents=frozenset(a.name for a in swarm_agents(bundle, swarm)),
    )


def lookup(properties: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted path (`chat.id`), or a private sentinel when absent."""
    value: Any = properties
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return _MISSING
        value = value[part]
    return value


def matches(rule: CompiledRule, event: str, properties: Mapping[str, Any]) -> bool:
    if rule.event is not None and rule.event != event:
        return False
    return all(lookup(properties, k) == v for k, v in rule.properties.items())


def _key(rule: CompiledRule, properties: Mapping[str, Any], default: str) -> str | None:
    if rule.key_property is not None:
        value = lookup(properties, rule.key_property)
        if value is _MISSING or value is None or isinstance(value, Mapping | list):
            return None  # the rule cannot name an instance for this event: try the next one
        return f"{rule.key_prefix}{value}"
    return rule.instance_key or default


def route(ingress: Ingress, event: str, properties: Mapping[str, Any]) -> Route | None:
    """Where a connector event goes; None when rules exist and none fits (drop + log).

    The first rule that fits and can name an instance wins. A rule whose `instanceKeyProperty`
    the event lacks lets a later rule take it; if none does, the first such rule routes it to
    the Swarm's instanceKey (one rule for a missing routing property, everywhere)."""
    if not ingress.rules:
        return Route(ingress.entry_agent, ingress.default_key, reply=True, rule=-1)
    fallback: Route | None = None
    for index, rule in enumerate(ingress.rules):
        if not matches(rule, event, properties):
            continue
        key = _key(rule, properties, ingress.default_key)
        if key is not None:
            return Route(rule.agent, key, reply=rule.reply, rule=index)
        if fallback is None:
            fallback = Route(rule.agent, ingress.default_key, reply=rule.reply, rule=index)
    return fallback


def route_to(
    ingress: Ingress, event: str, properties: Mapping[str, Any], agent: str, key: str
) -> Route | None:
    """Where an event the connector addressed to `agent`@`key` goes; None when the agent is
    not the swarm's, or rules exist and none that fits routes to that agent."""
    if agent not in ingress.agents:
        return None
    if not ingress.rules:
        return Route(agent, key, reply=True, rule=-1)
    for index, rule in enumerate(ingress.rules):
        if rule.agent == agent and matches(rule, event, properties):
            return Route(agent, key, reply=rule.reply, rule=index)
    return None


def why_unrouted(ingress: Ingress, event: str, properties: Mapping[str, Any]) -> str:
    """What the rules wanted that the event did not have (for the NO_ROUTE error)."""
    wants = []
    for rule in ingress.rules:
        need = [f"event {rule.event!r}"] if rule.event is not None else []
        need += [f"{k}={v!r}" for k, v in rule.properties.items()]
        wants.append(" and ".join(need) or "anything")
    got = ", ".join(sorted(properties)) or "none"
    return f"the rules want: {'; '.join(wants)} (the event's properties: {got})"
