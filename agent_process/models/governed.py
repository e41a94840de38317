"""A Model wrapped with the orchestrator's cost controls: permits before, usage after.

Before each call, when the agent has a budget (its own or the swarm's) or the Model has a
shared rate limit, the wrapper asks the orchestrator for a permit (`model_permit`, one round
trip over the agent's socket): the answer comes when the Model's bucket has room, or is
E_AGENT_BUDGET_EXCEEDED, which ends the turn without calling the provider. After each call
it reports the tokens and their price (`Model.spec.pricing`, bundles/pricing.py) with
`model_usage`, and a provider's 429 with its `retry-after` so the shared bucket drains for
every agent. Each call is a `model.usage` runtime event (model, tokens, cached tokens, cost,
and `permitMs`: how long the permit took, rate-limit waiting included).

The permit of a turn's first call is asked as the turn starts (`ask_ahead`, with an estimate
from the previous call and the new input; agent_process/permit_ahead.py), so its round trip
overlaps the turn's start. The report after a call carries the tokens its permit took from the
bucket (the grant's `tokens`), so the bucket settles what it really took.

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

    async def ask_ahead(self, args: JsonObject) -> None: ...

    async def report(self, args: JsonObject, *, last: bool = False) -> None: ...


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
        self._last_estimate: int | None = None
        """The estimate of the previous call: the base of the next turn's permit asked ahead."""

    async def ask_ahead(self, event_id: str, input_chars: int) -> None:
        """A turn starts: ask now for its first call's permit (after this process's first call,
        whose request size is the base of the estimate; before it, the call asks itself)."""
        desk = self._desk
        if not self._asks or desk is None or self._last_estimate is None:
            return
        estimate = self._last_estimate + input_chars // CHARS_PER_TOKEN
        await desk.ask_ahead({"model": self.resource, "eventId": event_id,
                              "estimatedTokens": estimate})  # fmt: skip

    async def complete(self, request: ModelRequest) -> ModelResponse:
        desk = self._desk
        estimate = estimate_tokens(request) if desk is not None else 0
        self._last_estimate = estimate
        waited: JsonObject = {}
        if self._asks and desk is not None:
            asked = time.perf_counter()
            estimate = await self._permit(desk, estimate)  # what the permit took
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
            usage = self._usage_args(desk, response.usage, estimate, cost)
            await desk.report(usage, last=not response.tool_calls)
        return response

    async def _permit(self, desk: PermitDesk, estimate: int) -> int:
        """Wait for the permit; the tokens it took from the bucket (a permit asked ahead took
        its own estimate)."""
        args: JsonObject = {"model": self.resource, "eventId": desk.turn_key(),
                            "estimatedTokens": estimate}  # fmt: skip
        answer = await desk.permit(args)
        if answer.ok:
            taken = answer.result.get("tokens") if isinstance(answer.result, dict) else None
            return int(taken) if isinstance(taken, int | float) and taken >= 0 else estimate
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
