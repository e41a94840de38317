"""The one seam between the runtime and bundle resolution (`bundles.refs`, `bundles.values`).

Everything the runtime needs to know about its agent's resources is asked here, and every
`BundleError` becomes a `ConfigProblem` carrying the first diagnostic's code and text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bundles import limits as bundle_limits
from bundles import refs, values
from bundles.diagnostics import BundleError
from bundles.kinds import AgentSpec, ExtensionSpec, Kind, ModelSpec, SwarmPolicy, ToolSpec
from bundles.limits import Limits
from bundles.model import Bundle, Resource
from protocol.errors import ErrorCode, ErrorInfo


class ConfigProblem(Exception):
    def __init__(self, info: ErrorInfo) -> None:
        super().__init__(info.message)
        self.info = info


def _problem(exc: BundleError) -> ConfigProblem:
    first = exc.diagnostics[0] if exc.diagnostics else None
    if first is None:
        return ConfigProblem(ErrorInfo(code=ErrorCode.E_CONFIG_SCHEMA_INVALID, message=str(exc)))
    return ConfigProblem(
        ErrorInfo(
            code=str(first.code),
            message=f"{first.path}: {first.message}",
            suggestion=first.suggestion,
        )
    )


def agent(bundle: Bundle, name: str) -> Resource[AgentSpec]:
    found = bundle.find(Kind.AGENT, name)
    if found is None:
        names = ", ".join(r.name for r in bundle.of_kind(Kind.AGENT)) or "none"
        raise ConfigProblem(
            ErrorInfo(
                code=ErrorCode.E_CONFIG_REF_NOT_FOUND,
                message=f"Agent/{name} is not in the bundle (agents: {names})",
                suggestion="start an agent that the bundle defines",
            )
        )
    return found


def limits(bundle: Bundle, name: str) -> Limits:
    """The agent's `spec.limits` (none when it is not in the bundle: its start reports that).
    The bundle was validated, so every size parses."""
    found = bundle.find(Kind.AGENT, name)
    return bundle_limits.resolved(found.spec.limits) if found is not None else Limits()


def tools(bundle: Bundle, agent: Resource[AgentSpec]) -> list[Resource[ToolSpec]]:
    try:
        return refs.resolve_tools(bundle, agent)
    except BundleError as exc:
        raise _problem(exc) from None


def extensions(bundle: Bundle, agent: Resource[AgentSpec]) -> list[Resource[ExtensionSpec]]:
    try:
        return refs.resolve_extensions(bundle, agent)
    except BundleError as exc:
        raise _problem(exc) from None


def model(bundle: Bundle, agent: Resource[AgentSpec]) -> Resource[ModelSpec]:
    try:
        return refs.resolve_model(bundle, agent)
    except BundleError as exc:
        raise _problem(exc) from None


def model_chain(bundle: Bundle, agent: Resource[AgentSpec]) -> list[Resource[ModelSpec]]:
    """The agent's Model and its fallbacks, in order."""
    try:
        return refs.model_chain(bundle, agent)
    except BundleError as exc:
        raise _problem(exc) from None


def system_prompt(bundle: Bundle, agent: Resource[AgentSpec]) -> str:
    try:
        return refs.system_prompt(bundle, agent)
    except BundleError as exc:
        raise _problem(exc) from None


def api_key(bundle: Bundle, model: Resource[ModelSpec], state_root: Path) -> str | None:
    if model.spec.api_key is None:
        return None
    try:
        return values.resolve_value(
            bundle, model.spec.api_key, state_root=state_root, where=f"Model/{model.name} apiKey"
        )
    except BundleError as exc:
        raise _problem(exc) from None


def swarm_policy(bundle: Bundle, swarm: str) -> SwarmPolicy:
    """The policy of the named swarm; defaults when the bundle has no swarm of that name
    (an agent may be run on its own, e.g. in tests)."""
    found: Any = bundle.find(Kind.SWARM, swarm)
    return found.spec.policy if found is not None else SwarmPolicy()
