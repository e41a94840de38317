"""Fallback chains: `Model.spec.fallback: [Model/b, Model/c]` retries a step on the next Model.

A step whose model call fails because the provider is rate limited (429), overloaded or broken
(any 5xx, Anthropic's 529 included), unreachable, or too slow (a timeout) is sent again,
unchanged, to the next Model of the chain, with that Model's own provider, endpoint, key and
options (each link is a `Governed` model: its own permits, rate limit and pricing). Other
failures (a bad request, a refused key, a used-up budget) end the step as before: another
model would fail the same way. Each switch is a `model.fallback` runtime event (from, to, the
error code and status); the last link's failure is the step's.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent_process.models.base import ModelError, ModelRequest, ModelResponse
from agent_process.models.governed import Governed, Record
from protocol.errors import ErrorCode

RETRIED_ON = frozenset(
    {ErrorCode.E_MODEL_RATE_LIMIT, ErrorCode.E_MODEL_TIMEOUT, ErrorCode.E_MODEL_CONNECTION}
)


def falls_back(exc: ModelError) -> bool:
    return exc.info.code in RETRIED_ON or (exc.status is not None and exc.status >= 500)


class FallbackChain:
    """`Model` over a primary and its fallbacks, tried in order."""

    def __init__(self, links: Sequence[Governed], record: Record) -> None:
        assert links, "a chain has at least its primary model"
        self.links = list(links)
        self.name = self.links[0].name
        self._record = record

    async def complete(self, request: ModelRequest) -> ModelResponse:
        last = len(self.links) - 1
        for i, link in enumerate(self.links):
            try:
                return await link.complete(request)
            except ModelError as exc:
                if i == last or not falls_back(exc):
                    raise
                nxt = self.links[i + 1]
                self._record("model.fallback", {"from": link.resource, "to": nxt.resource,
                                                "code": exc.info.code, "status": exc.status,
                                                "message": exc.info.message})  # fmt: skip
        raise AssertionError("unreachable: the last link returns or raises")

    async def aclose(self) -> None:
        for link in self.links:
            await link.aclose()
