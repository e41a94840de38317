"""A Model wrapped with the orchestrator's cost controls: permits before, usage after.

Before each call, when the agent has a budget (its own or the swarm's) or the Model has a
shared rate limit, the wrapper asks the orchestrator for a permit (`model_permit`, one round
trip over the agent's socket): the answer comes when the Model's bucket has room, or is
E_AGENT_BUDGET_EXCEEDED, which ends the turn without calling the provider. After each call
it reports the tokens and their price (`Model.spec.pricing`, bundles/pricing.py) with
`model_usage`, and a provider's 429 with its `retry-after` so the shared bucket drains for
every agent. Each call is a `model.usage` runtime event (model, tokens, cached tokens, cost,
and `permitMs`: how long the permit took, rate-limit waiting included).

Outside a daemon (no `PermitDesk`) the wrapper only records the runtime event.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from agent_process.models.base import Model, ModelError, ModelRequest, ModelResponse, Usage
from bundles.kinds import Pricing
from bundles.pricing import cost_usd
from protocol.errors import ErrorCode
from protocol.jsontypes import JsonObject
from protocol.messages import CallResultPayload

CHARS_PER_TOKEN = 4
"""A rough estimate of the input tokens before the call, for a tokens-per-minute bucket; the
report after the call corrects it with the provider's count."""

Record = Callable[[str, JsonObject], None]
"""`(event type, data)`: a runtime event of this call (telemetry.EventBus)."""


@runtime_checkable
class PermitDesk(Protocol):
    """The orchestrator's side, as the agent sees it (agent_process.bridge.Bridge)."""

    def turn_key(self) -> str | None: ...

    async def permit(self, args: JsonObject) -> CallResultPayload: ...

    async def report(self, args: JsonObject) -> None: ...


def estimate_tokens(request: ModelRequest) -> int:
    chars = len(request.system or "")
    chars += sum(len(m.content) for m in request.messages)
    chars += sum(len(t.description) + len(str(t.parameters)) for t in request.tools)
    return chars // CHARS_PER_TOKEN


class Governed:
    """`Model` for one Model resource (`resource`), metered by `desk`."""

    def __init__(
        self,
        inner: Model,
        *,
        resource: str,
        pricing: Pricing | None,
        desk: PermitDesk | None,
        asks: bool,
        record: Record,
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self.resource = resource
        self._pricing = pricing
        self._desk = desk
        self._asks = asks and desk is not None
        """Whether a permit is needed (a budget or a rate limit applies)."""
        self._record = record

    async def complete(self, request: ModelRequest) -> ModelResponse:
        desk = self._desk
        estimate = estimate_tokens(request) if desk is not None else 0
        waited: JsonObject = {}
        if self._asks and desk is not None:
            asked = time.perf_counter()
            await self._permit(desk, estimate)
            waited["permitMs"] = round((time.perf_counter() - asked) * 1000, 4)
        try:
            response = await self.inner.complete(request)
        except ModelError as exc:
            if desk is not None and exc.info.code == ErrorCode.E_MODEL_RATE_LIMIT:
                await desk.report(self._usage_args(desk, Usage(), estimate, limited=exc))
            raise
        cost = cost_usd(
            self._pricing,
            response.usage.input_tokens,
            response.usage.output_tokens,
            response.usage.cached_input_tokens,
        )
        self._record("model.usage", {"model": self.resource, **response.usage.as_dict(),
                                     "costUsd": round(cost, 8), **waited})  # fmt: skip
        if desk is not None:
            await desk.report(self._usage_args(desk, response.usage, estimate, cost))
        return response

    async def _permit(self, desk: PermitDesk, estimate: int) -> None:
        args: JsonObject = {"model": self.resource, "eventId": desk.turn_key(),
                            "estimatedTokens": estimate}  # fmt: skip
        answer = await desk.permit(args)
        if answer.ok:
            return
        error = answer.error
        code = error.code if error is not None else ErrorCode.E_AGENT_BUDGET_EXCEEDED
        message = error.message if error is not None else "no permit for a model call"
        raise ModelError(
            ErrorCode(code) if code in ErrorCode.__members__ else ErrorCode.E_MODEL_ERROR,
            message,
            suggestion=error.suggestion if error is not None else None,
        )

    def _usage_args(
        self,
        desk: PermitDesk,
        usage: Usage,
        estimate: int,
        cost: float = 0.0,
        *,
        limited: ModelError | None = None,
    ) -> JsonObject:
        args: JsonObject = {
            "model": self.resource,
            "eventId": desk.turn_key(),
            "inputTokens": usage.input_tokens,
            "outputTokens": usage.output_tokens,
            "cachedInputTokens": usage.cached_input_tokens,
            "costUsd": cost,
            "estimatedTokens": estimate,
        }
        if limited is not None:  # the provider's 429: the shared bucket drains
            args["rateLimited"] = True
            if limited.retry_after is not None:
                args["retryAfterSeconds"] = limited.retry_after
        return args

    async def aclose(self) -> None:
        await self.inner.aclose()
