"""The permit service with a recording broker: who asks is the sender, garbage counts as 0."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bundles.kinds import Budget, RateLimit
from orchestrator.calls.budgets import Budgets
from orchestrator.calls.permits import Permits
from orchestrator.calls.ratelimits import RateLimits
from orchestrator.supervision.table import ProcessEntry
from protocol.ids import agent_address
from protocol.messages import CallOp, CallPayload, CallResultPayload


class Replies:
    def __init__(self) -> None:
        self.results: list[CallResultPayload] = []

    def reply(self, entry: ProcessEntry, result: CallResultPayload) -> None:
        self.results.append(result)

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the permit service does not {name}")


def service(tmp_path: Path) -> tuple[Permits, Replies, ProcessEntry]:
    budgets = Budgets(tmp_path / "u.json", "s")
    budgets.load()
    budgets.set_budgets({"a": Budget(tokens_per_day=100)}, None)
    limits = RateLimits()
    limits.configure({"m": RateLimit(requests_per_minute=60)})
    replies = Replies()
    entry = ProcessEntry(address=agent_address("a", "k"))
    return Permits(replies, budgets, limits), replies, entry  # type: ignore[arg-type]


def call(op: CallOp, **args: Any) -> CallPayload:
    return CallPayload(call_id="c", op=op, args=args)


async def test_usage_garbage_counts_as_nothing_and_a_budget_refuses(tmp_path: Path) -> None:
    permits, replies, entry = service(tmp_path)
    permits.on_call(entry, call(CallOp.MODEL_PERMIT, model="m", eventId="e1", estimatedTokens=1))
    assert replies.results[-1].ok
    assert replies.results[-1].result == {"waitedMs": 0.0, "tokens": 1}  # what it took, to settle
    for junk in (float("inf"), float("nan"), -5, "many", True, 1e300):
        permits.on_call(entry, call(CallOp.MODEL_USAGE, model="m", inputTokens=junk, costUsd=junk))
    row = next(r for r in permits.budgets.rows() if r.name == "a")
    assert (row.input_tokens, row.cost_usd) == (0, 0.0)
    permits.on_call(entry, call(CallOp.MODEL_USAGE, model="m", inputTokens=150, outputTokens=1))
    permits.on_call(entry, call(CallOp.MODEL_PERMIT, model="m", eventId="e1"))
    refused = replies.results[-1]
    assert not refused.ok and refused.error is not None
    assert refused.error.code == "E_AGENT_BUDGET_EXCEEDED"
    permits.close()
