"""What the runtime asks of a loaded bundle: the tools, extensions and model of an agent, the
agents of a swarm, an agent's system prompt, a connection's connector and swarm.

Every helper returns effective resources (selector `overrides` already merged in) and raises a
coded `BundleError` if something cannot be resolved; after `load_bundle` succeeded that does not
happen, because validation resolved the same references with the same code.
"""

from __future__ import annotations

from typing import Any

from bundles.diagnostics import BundleError, FieldPath, format_location, single
from bundles.kinds import (
    AgentSpec,
    ConnectionSpec,
    ConnectorSpec,
    ExtensionSpec,
    IngressRoute,
    Kind,
    ModelSpec,
    ObjectRef,
    RefLike,
    SwarmSpec,
    ToolSpec,
)
from bundles.model import Bundle, Resource
from bundles.paths import PathProblem, file_inside
from bundles.resolve import (
    RefFailure,
    deep_merge,
    lookup,
    parse_ref,
    resolve_item,
    resolve_list,
)
from protocol.errors import ErrorCode

__all__ = [
    "connection_connector",
    "connection_swarm",
    "deep_merge",
    "entry_agent",
    "find",
    "parse_ref",
    "resolve_extensions",
    "resolve_item",
    "resolve_model",
    "resolve_tools",
    "route_agent",
    "swarm_agents",
    "system_prompt",
]


def _error(res: Resource[Any], at: FieldPath, failure: RefFailure | PathProblem) -> BundleError:
    where = format_location(str(res.location.file.name), res.location.line, at)
    return single(failure.code, failure.message, where, failure.suggestion)


def find(
    bundle: Bundle,
    ref: str | ObjectRef,
    expected: Kind,
    *,
    owner: Resource[Any] | None = None,
    at: FieldPath = (),
) -> Resource[Any]:
    """One resource by reference (`Kind/name`, bare name, or `{kind, name, package}`)."""
    try:
        parsed = parse_ref(ref, expected=expected)
        return lookup(bundle, parsed, from_package=owner.package if owner else None)
    except RefFailure as failure:
        if owner is None:
            raise single(failure.code, failure.message, str(ref), failure.suggestion) from None
        raise _error(owner, at, failure) from None


def _list(
    bundle: Bundle, owner: Resource[Any], items: list[RefLike], kind: Kind, field: str
) -> list[Resource[Any]]:
    try:
        return resolve_list(bundle, items, kind, from_package=owner.package)
    except RefFailure as failure:
        raise _error(owner, ("spec", field), failure) from None


def resolve_tools(bundle: Bundle, agent: Resource[AgentSpec]) -> list[Resource[ToolSpec]]:
    """The agent's Tool resources in `spec.tools` order, overrides applied, no repeats."""
    return _list(bundle, agent, agent.spec.tools, Kind.TOOL, "tools")


def resolve_extensions(bundle: Bundle, agent: Resource[AgentSpec]) -> list[Resource[ExtensionSpec]]:
    """The agent's Extensions in `spec.extensions` order (the first is the outermost layer)."""
    return _list(bundle, agent, agent.spec.extensions, Kind.EXTENSION, "extensions")


def resolve_model(bundle: Bundle, agent: Resource[AgentSpec]) -> Resource[ModelSpec]:
    ref = agent.spec.model_config.model_ref
    return find(bundle, ref, Kind.MODEL, owner=agent, at=("spec", "modelConfig", "modelRef"))


def model_chain(bundle: Bundle, agent: Resource[AgentSpec]) -> list[Resource[ModelSpec]]:
    """The agent's Model, then its `spec.fallback` Models in order (a fallback's own fallback
    list is not followed: the chain is the one the agent's Model declares)."""
    model = resolve_model(bundle, agent)
    return [model] + [
        find(bundle, ref, Kind.MODEL, owner=model, at=("spec", "fallback", i))
        for i, ref in enumerate(model.spec.fallback)
    ]


def swarm_agents(bundle: Bundle, swarm: Resource[SwarmSpec]) -> list[Resource[AgentSpec]]:
    """The swarm's agents in `spec.agents` order (overrides applied)."""
    return _list(bundle, swarm, swarm.spec.agents, Kind.AGENT, "agents")


def entry_agent(bundle: Bundle, swarm: Resource[SwarmSpec]) -> Resource[AgentSpec]:
    """The swarm's entry agent, as the effective resource from `spec.agents`."""
    target = find(
        bundle, swarm.spec.entry_agent, Kind.AGENT, owner=swarm, at=("spec", "entryAgent")
    )
    for agent in swarm_agents(bundle, swarm):
        if agent.key == target.key:
            return agent
    failure = RefFailure(
        ErrorCode.E_CONFIG_REF_NOT_FOUND,
        f"entryAgent {target.name} is not one of the swarm's agents",
        f"add Agent/{target.name} to spec.agents",
    )
    raise _error(swarm, ("spec", "entryAgent"), failure)


def system_prompt(bundle: Bundle, agent: Resource[AgentSpec]) -> str:
    """`prompt.system`, then the text of `prompt.systemRef` (relative to the agent's root)."""
    parts = []
    if agent.spec.prompt.system:
        parts.append(agent.spec.prompt.system)
    if agent.spec.prompt.system_ref:
        try:
            path = file_inside(agent.root, agent.spec.prompt.system_ref, what="systemRef")
            parts.append(path.read_text(encoding="utf-8"))
        except PathProblem as problem:
            raise _error(agent, ("spec", "prompt", "systemRef"), problem) from None
        except (OSError, UnicodeDecodeError) as exc:
            failure = PathProblem(ErrorCode.E_CONFIG_ENTRY_NOT_FOUND, f"cannot read: {exc}")
            raise _error(agent, ("spec", "prompt", "systemRef"), failure) from None
    return "\n\n".join(p.strip("\n") for p in parts)


def connection_connector(
    bundle: Bundle, connection: Resource[ConnectionSpec]
) -> Resource[ConnectorSpec]:
    ref = connection.spec.connector_ref
    return find(bundle, ref, Kind.CONNECTOR, owner=connection, at=("spec", "connectorRef"))


def connection_swarm(bundle: Bundle, connection: Resource[ConnectionSpec]) -> Resource[SwarmSpec]:
    """`spec.swarmRef`, or the first Swarm of the user's bundle when it is omitted."""
    ref = connection.spec.swarm_ref
    if ref is None:
        try:
            return bundle.swarm()
        except KeyError:
            failure = RefFailure(ErrorCode.E_CONFIG_NO_SWARM, "the bundle declares no Swarm")
            raise _error(connection, ("spec", "swarmRef"), failure) from None
    return find(bundle, ref, Kind.SWARM, owner=connection, at=("spec", "swarmRef"))


def route_agent(
    bundle: Bundle, route: IngressRoute, swarm: Resource[SwarmSpec]
) -> Resource[AgentSpec]:
    """An ingress route's agent (`agentRef`), or the swarm's entry agent when omitted."""
    if route.agent_ref is None:
        return entry_agent(bundle, swarm)
    return find(bundle, route.agent_ref, Kind.AGENT, owner=swarm)
