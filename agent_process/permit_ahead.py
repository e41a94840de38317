"""The permit of a turn's first model call, asked as the turn starts (ARCHITECTURE.md §8).

A metered model call asks the orchestrator for a permit (`model_permit`, models/governed.py),
one round trip before the provider is called. For the first call of a turn the agent knows
the call will come as soon as it takes the event, so it asks then, before it reports
`processing` and sets the turn up, and the model call takes the answer (`Bridge.permit`): the
round trip overlaps the turn's start instead of delaying the call. The permit is the same one
(same budget check and turn count, same place in the Model's rate-limit queue), asked a
moment earlier. What is never used goes back: a permit older than `FRESH_S` when the call
comes (a slow turn start) is replaced by a new one, and one left when the turn ends without a
model call; a returned permit gives its tokens back to the Model's bucket with a zero-usage
report (its request slot is spent, as a permit for a call that failed is).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from protocol.jsontypes import JsonObject
from protocol.messages import CallResultPayload

FRESH_S = 1.0
"""A permit asked ahead that was answered longer ago than this is not used: the call is not
let through on an old grant of the shared rate limit."""


@dataclass(slots=True)
class Ahead:
    model: str
    event_id: str
    call_id: str
    future: asyncio.Future[CallResultPayload]
    asked: float

    @classmethod
    def of(
        cls, args: JsonObject, call_id: str, future: asyncio.Future[CallResultPayload], now: float
    ) -> Ahead:
        return cls(str(args.get("model")), str(args.get("eventId")), call_id, future, now)

    def usable(self, args: JsonObject, now: float) -> bool:
        """For this call (same Model, same turn), and not an old grant."""
        if (str(args.get("model")), str(args.get("eventId"))) != (self.model, self.event_id):
            return False
        return not self.future.done() or now - self.asked <= FRESH_S

    def give_back(self) -> JsonObject | None:
        """The zero-usage report that returns a granted permit's tokens (None: nothing to
        return, the permit was refused or never answered)."""
        if self.future.cancelled() or not self.future.done():
            return None
        answer = self.future.result()
        if not answer.ok or not isinstance(answer.result, dict):
            return None
        taken = answer.result.get("tokens")
        return {
            "model": self.model,
            "eventId": self.event_id,
            "inputTokens": 0,
            "outputTokens": 0,
            "cachedInputTokens": 0,
            "costUsd": 0.0,
            "estimatedTokens": taken if isinstance(taken, int | float) else 0,
        }
