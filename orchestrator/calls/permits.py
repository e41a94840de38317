"""The `model_permit` and `model_usage` calls: agents ask before each model call and report
after it; budgets (orchestrator/calls/budgets.py) and shared rate limits
(orchestrator/calls/ratelimits.py)
answer.

    model_permit {model, eventId, estimatedTokens}
        -> ok {waitedMs, tokens} when the Model's bucket has room (at once when it has;
           tokens: what the permit took from the bucket), or
           E_AGENT_BUDGET_EXCEEDED when the agent's or the swarm's budget is used up
    model_usage {model, eventId, inputTokens, outputTokens, cachedInputTokens, costUsd,
                 estimatedTokens, rateLimited, retryAfterSeconds}
        -> no answer: the tallies grow, the bucket settles, a provider's 429 drains it

Which agent asks is the sender process, never an argument: a process cannot spend another's
budget. An agent whose Model has no rate limit and who has no budget only reports.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass

import structlog

from bundles.kinds import Kind
from bundles.model import Bundle
from bundles.refs import swarm_agents
from orchestrator.calls.budgets import Budgets, Call
from orchestrator.calls.ratelimits import RateLimits
from orchestrator.routing.broker import Broker
from orchestrator.supervision.table import ProcessEntry
from protocol.errors import ErrorInfo
from protocol.jsontypes import JsonObject
from protocol.messages import CallOp, CallPayload, CallResultPayload

PERMIT_OPS = frozenset({CallOp.MODEL_PERMIT, CallOp.MODEL_USAGE})
log = structlog.get_logger("goondan.permits")


MAX_REPORTED = 1e12
"""A frame's number past this (or not finite, or negative) is garbage, counted as 0."""


def _number(args: JsonObject, key: str) -> float:
    value = args.get(key)
    if not isinstance(value, int | float) or isinstance(value, bool):
        return 0.0
    number = float(value)
    return number if math.isfinite(number) and 0 <= number <= MAX_REPORTED else 0.0


@dataclass(slots=True)
class Permits:
    broker: Broker
    budgets: Budgets
    limits: RateLimits

    def configure(self, bundle: Bundle, swarm: str) -> None:
        """The budgets of the swarm and its agents, and the Models' rate limits (at start and
        after each reload)."""
        res = bundle.swarm(swarm)
        members = swarm_agents(bundle, res)
        self.budgets.set_budgets(
            {a.name: a.spec.policy.budget for a in members}, res.spec.policy.budget
        )
        models = bundle.of_kind(Kind.MODEL)
        self.limits.configure({m.name: m.spec.rate_limit for m in models if m.spec.rate_limit})

    def close(self) -> None:
        self.limits.close()
        self.budgets.save()

    def on_call(self, entry: ProcessEntry, payload: CallPayload) -> None:
        if payload.op is CallOp.MODEL_PERMIT:
            self._permit(entry, payload)
        else:
            self._usage(entry, payload)

    def refuse_event(self, agent: str) -> ErrorInfo | None:
        """Why a new event for `agent` is answered at once instead of starting a turn."""
        return self.budgets.refusal(agent)

    def _permit(self, entry: ProcessEntry, payload: CallPayload) -> None:
        args = payload.args
        event_id = args.get("eventId")
        turn = event_id if isinstance(event_id, str) and event_id else None
        refused = self.budgets.refusal(entry.address.name, turn)
        if refused is not None:
            log.info("budget_exceeded", agent=entry.address.name, reason=refused.message)
            self.broker.reply(entry, CallResultPayload(call_id=payload.call_id, ok=False,
                                                       error=refused))  # fmt: skip
            return
        model = str(args.get("model", ""))
        estimate = _number(args, "estimatedTokens")
        waiting = self.limits.acquire(model, estimate)
        if waiting is None:
            self.broker.reply(entry, _granted(payload, 0.0, estimate))
            return
        asked = time.monotonic()
        log.info("rate_limit_waiting", model=model, agent=entry.address.name)

        def granted(future: asyncio.Future[None]) -> None:
            if not future.cancelled():
                waited = (time.monotonic() - asked) * 1000
                log.info("rate_limit_waited", model=model, agent=entry.address.name,
                         waited_ms=round(waited, 1))  # fmt: skip
                self.broker.reply(entry, _granted(payload, waited, estimate))

        waiting.add_done_callback(granted)

    def _usage(self, entry: ProcessEntry, payload: CallPayload) -> None:
        args = payload.args
        model = str(args.get("model", ""))
        call = Call(
            input_tokens=int(_number(args, "inputTokens")),
            output_tokens=int(_number(args, "outputTokens")),
            cached_input_tokens=int(_number(args, "cachedInputTokens")),
            cost_usd=_number(args, "costUsd"),
        )
        event_id = args.get("eventId")
        if isinstance(event_id, str) and event_id:
            self.budgets.count(entry.address.name, event_id)
        self.budgets.add(entry.address.name, call)
        used = call.input_tokens + call.output_tokens
        self.limits.settle(model, _number(args, "estimatedTokens"), used)
        if args.get("rateLimited") is True:
            retry = _number(args, "retryAfterSeconds") or None
            log.warning("provider_rate_limited", model=model, agent=entry.address.name,
                        retry_after=retry)  # fmt: skip
            self.limits.drain(model, retry)


def _granted(payload: CallPayload, waited_ms: float, tokens: float) -> CallResultPayload:
    result = {"waitedMs": round(waited_ms, 3), "tokens": int(tokens)}
    return CallResultPayload(call_id=payload.call_id, ok=True, result=result)
