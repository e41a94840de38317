"""The bundle the rehearsal starts its children from: each agent as far as the fork server may
run it.

An agent of the real bundle becomes a stand-in of the same name, with the same prompt (when it
reads), its built-in tools whose entries the fork server built (`prebuilt_tools`: nothing to
import), no extensions (a user's code runs in the agent's own process only) and a scripted model
that answers at once without a network. Every other resource is the real bundle's. The stand-in
is dropped after the rehearsal; the real bundle is not changed.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import msgspec

from agent_process import prebuilt_tools, resolve
from bundles.kinds import AgentSpec, Kind, Metadata, ModelConfig, ModelSpec, ObjectRef, Prompt
from bundles.kinds import RefItem as Ref
from bundles.model import Bundle, Resource, SourceLocation

PACKAGE = "@goondan/forkprep"
"""The stand-in model's package: no bundle's reference can name it by accident."""
MODEL = ObjectRef(kind=Kind.MODEL, name="rehearsal", package=PACKAGE)


def bundle(real: Bundle) -> Bundle:
    model: Resource[ModelSpec] = Resource(
        kind=Kind.MODEL,
        metadata=Metadata(name=MODEL.name),
        spec=ModelSpec(provider="scripted", model=MODEL.name),  # echoes the input
        location=SourceLocation(file=real.path, line=1, document=0),
        package=PACKAGE,
        root=real.root,
    )
    resources: list[Resource[Any]] = [
        _agent(real, res) if res.kind is Kind.AGENT and res.package is None else res
        for res in real.resources
    ]
    # packages=None: this bundle's packages are chosen here, not loaded from the installed
    # ones, so its agents may name the stand-in's package without declaring it
    return dataclasses.replace(real, resources=[*resources, model], packages=None)


def _agent(real: Bundle, agent: Resource[AgentSpec]) -> Resource[AgentSpec]:
    try:
        prepared = [t for t in resolve.tools(real, agent) if prebuilt_tools.take(t) is not None]
    except resolve.ConfigProblem:
        prepared = []
    try:
        resolve.system_prompt(real, agent)
        prompt = agent.spec.prompt
    except resolve.ConfigProblem:  # the child reports it; the stand-in starts without it
        prompt = Prompt()
    spec = msgspec.structs.replace(
        agent.spec,
        model_config=ModelConfig(model_ref=MODEL),
        prompt=prompt,
        tools=[Ref(kind=t.kind, name=t.name, package=t.package) for t in prepared],
        extensions=[],
        required_tools=[],
    )
    return dataclasses.replace(agent, spec=spec)
