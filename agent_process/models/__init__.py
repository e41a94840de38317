"""Model providers behind one interface (`models.base.Model`); `create_model` picks one."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from pathlib import Path

from agent_process.models.base import Model, ModelError, ModelRequest, ModelResponse, Usage
from bundles.kinds import ModelSpec
from bundles.model import Resource
from protocol.errors import ErrorCode

__all__ = [
    "Model",
    "ModelError",
    "ModelRequest",
    "ModelResponse",
    "Usage",
    "create_model",
    "warm",
]

PROVIDERS = ("scripted", "openai", "anthropic")


def create_model(
    resource: Resource[ModelSpec],
    *,
    api_key: str | None,
    agent: str | None = None,
    recorded: bool = True,
) -> Model:
    """Build the provider client, recording or replaying when the Model's `recording` (or the
    environment, models/recording.py) says so and `recorded` (False: the fork server's
    rehearsal, which writes nothing to disk); `agent` names the caller in a replay's errors.
    Raises ModelError (E_MODEL_*) for a bad configuration."""
    from agent_process.models.recording import wrap

    inner = _provider(resource, api_key=api_key)
    return wrap(inner, resource, agent=agent) if recorded else inner


def _provider(resource: Resource[ModelSpec], *, api_key: str | None) -> Model:
    spec = resource.spec
    root = resource.root if isinstance(resource.root, Path) else Path(resource.root)
    # SDKs are imported lazily: each is a large import at start-up and a process uses one.
    match spec.provider:
        case "scripted":
            from agent_process.models.scripted import ScriptedModel

            return ScriptedModel.from_options(spec.model, spec.options, root)
        case "openai":
            from agent_process.models.openai_chat import OpenAIChatModel

            return OpenAIChatModel(
                spec.model, api_key=api_key, endpoint=spec.endpoint, options=spec.options
            )
        case "anthropic":
            from agent_process.models.anthropic_messages import AnthropicModel

            return AnthropicModel(
                spec.model, api_key=api_key, endpoint=spec.endpoint, options=spec.options
            )
    raise ModelError(
        ErrorCode.E_MODEL_BAD_REQUEST,
        f"Model/{resource.name}: unknown provider {spec.provider!r}",
        suggestion=f"use one of: {', '.join(PROVIDERS)}",
    )


def warm(models: Iterable[Resource[ModelSpec]]) -> None:
    """Build each model client once in the fork server and drop it, so that what every child's
    `create_model` would otherwise build again in its own private memory is already there and
    shared: the TLS trust store (`tls_context`), the SDKs' lazily imported transports, the
    compiled patterns of scripted models (`re` caches them). Construction opens no connection;
    a bad model is skipped here and reported by the child when it starts."""
    for resource in models:
        with contextlib.suppress(ModelError):
            create_model(resource, api_key=None)
