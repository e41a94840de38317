"""Run every case (x repeat) as its own fresh instance, N at a time, through `send`'s ingress
in the daemon started for the run, or a running one with `--attach` (evals/target.py;
docs/guides/evals.md)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from orchestrator.evals.cost import Prices, case_cost, usage_cost
from orchestrator.evals.evaluators import Outcome, evaluate
from orchestrator.evals.judge import JudgeClient, JudgeFailed
from orchestrator.evals.spec import Case, EvalFile
from orchestrator.evals.target import Target, TargetFailed
from orchestrator.evals.trail import read_trail
from orchestrator.ingress.send import pending_call
from protocol.control import SendText
from protocol.events import AgentEvent
from protocol.jsontypes import JsonObject

CALL_WAIT_S = 60.0


@dataclass(frozen=True, slots=True)
class Result:
    case: str
    repeat: int
    instance_key: str
    passed: bool
    evaluator: str | None
    why: str | None
    tokens: int | None
    latency_ms: float
    trace_id: str | None
    pids: tuple[int, ...] = ()
    """The agent processes that ran the case's instance (one per agent it reached)."""
    judge_reason: str | None = None
    """The `judge` evaluator's reason, when it gave a verdict (pass or fail)."""
    cost_usd: float | None = None
    """What the case's model calls cost, its judge's included (evals/cost.py); None: a Model
    without pricing."""
    judge_cost_usd: float | None = None
    """The judge's part of `cost_usd`; None: not judged, or the judge's Model has no pricing."""
    started_at: float = 0.0
    """When its first input was sent (Unix time): which cases ran together, and where to look
    in the logs."""


def _tokens(reply: AgentEvent) -> int | None:
    usage = reply.metadata.get("usage")
    if not isinstance(usage, dict):
        return None
    for key in ("totalTokens", "total_tokens"):
        if isinstance(usage.get(key), int):
            return int(usage[key])
    counted = [v for k, v in usage.items() if isinstance(v, int) and "token" in k.lower()]
    return sum(counted) if counted else None


async def _answered(target: Target, reply: AgentEvent, case: Case) -> AgentEvent:
    """Answer the client-side calls the case's `answers` name, until the turn ends."""
    while (call := pending_call(reply)) is not None:
        method, call_id = call.get("method"), call.get("id")
        if (
            not isinstance(method, str)
            or method not in case.answers
            or not isinstance(call_id, str)
        ):
            raise CaseFailed(f"client-side call {method} has no answer in the case's `answers`")
        try:
            reply = await target.answer(call_id, case.answers[method], CALL_WAIT_S)
        except TargetFailed as exc:
            raise CaseFailed(f"answering {method}: {exc}") from exc
    return reply


class CaseFailed(Exception):
    """A case that cannot go on (its turn failed, a call without an answer)."""

    pass


class Judgment(NamedTuple):
    failed: tuple[str, str] | None
    """The judge's failure (it failed or could not judge)."""
    reason: str | None
    spent: bool = False
    """The judge's model was called (its tokens count in the case's cost)."""
    cost_usd: float | None = None


def _judgment(failed: tuple[str, str] | None, reason: str | None, model: str,
              usage: dict[str, int] | None, prices: Prices) -> Judgment:  # fmt: skip
    if usage is None:
        return Judgment(failed, reason)
    return Judgment(failed, reason, True,
                    usage_cost(prices.get(model.removeprefix("Model/")), usage))  # fmt: skip


async def _judged(judge: JudgeClient | None, case: Case, out: Outcome, prices: Prices) -> Judgment:
    want = case.expect.get("judge")
    if want is None or judge is None:
        return Judgment(None, None)
    model = want["model"]
    try:
        verdict = await judge.judge(model, want["rubric"], "\n\n".join(case.inputs), out.reply)
    except JudgeFailed as exc:
        return _judgment(("judge", str(exc)), None, model, exc.usage, prices)
    failed = None if verdict.passed else ("judge", verdict.reason)
    return _judgment(failed, verdict.reason, model, verdict.usage, prices)


def _total(case: float | None, judged: Judgment) -> float | None:
    """The instance's cost plus the judge's; unknown when either is (not free)."""
    if not judged.spent:
        return case
    return None if case is None or judged.cost_usd is None else case + judged.cost_usd


async def run_case(
    target: Target,
    spec: EvalFile,
    case: Case,
    repeat: int,
    judge: JudgeClient | None = None,
    prices: Prices | None = None,
) -> Result:
    key = f"eval-{uuid.uuid4().hex[:12]}"
    timeout_ms = target.timeout_ms
    started_at = time.time()
    start = time.monotonic()
    tokens: int | None = None
    reply: AgentEvent | None = None
    error: str | None = None
    try:
        for n, text in enumerate(case.inputs):
            req = SendText(request_id=f"{key}-{n}", text=text, agent=case.agent or spec.agent,
                           instance_key=key, timeout_ms=timeout_ms)  # fmt: skip
            reply = await _answered(target, await target.send(req), case)
            if reply.error is not None:
                raise CaseFailed(f"{reply.error.code}: {reply.error.message}")
            used = _tokens(reply)
            tokens = used if tokens is None else tokens + (used or 0)
    except (TargetFailed, CaseFailed) as exc:
        error = str(exc)
    latency = (time.monotonic() - start) * 1000
    pids = await target.pids(key)
    trail = read_trail(target.layout, target.swarm, key)
    cost = case_cost(target.layout, target.swarm, key, prices or {})
    out = Outcome(reply=reply.input if reply else "", tokens=tokens, latency_ms=latency,
                  error=error, tool_calls=trail.tool_calls, steps=trail.max_steps)  # fmt: skip
    failed = evaluate(case.expect, out)
    judged = Judgment(None, None)
    if failed is None:  # the model's verdict last: no tokens spent on a case already failed
        judged = await _judged(judge, case, out, prices or {})
        failed = judged.failed
    return Result(case=case.name, repeat=repeat, instance_key=key, passed=failed is None,
                  evaluator=failed[0] if failed else None, why=failed[1] if failed else None,
                  tokens=tokens, latency_ms=latency,
                  trace_id=reply.trace.trace_id if reply else None, pids=pids,
                  judge_reason=judged.reason, cost_usd=_total(cost, judged),
                  judge_cost_usd=judged.cost_usd, started_at=started_at)  # fmt: skip


async def run_all(
    target: Target,
    spec: EvalFile,
    concurrency: int,
    repeat: int,
    progress: Callable[[int, int], None],
    judge: JudgeClient | None = None,
    prices: Prices | None = None,
) -> list[Result]:
    gate = asyncio.Semaphore(concurrency)
    total, done = len(spec.cases) * repeat, 0

    async def one(case: Case, k: int) -> Result:
        nonlocal done
        async with gate:
            result = await run_case(target, spec, case, k, judge, prices)
        done += 1
        progress(done, total)
        return result

    jobs = [one(case, k) for case in spec.cases for k in range(repeat)]
    return list(await asyncio.gather(*jobs))


def as_row(result: Result) -> JsonObject:
    return {
        "case": result.case, "repeat": result.repeat, "instanceKey": result.instance_key,
        "passed": result.passed, "evaluator": result.evaluator, "why": result.why,
        "tokens": result.tokens, "latencyMs": round(result.latency_ms, 1),
        "startedAt": round(result.started_at, 3),
        "traceId": result.trace_id, "pids": list(result.pids),
        "judgeReason": result.judge_reason,
        "costUsd": _usd(result.cost_usd), "judgeCostUsd": _usd(result.judge_cost_usd),
    }  # fmt: skip


def _usd(usd: float | None) -> float | None:
    return None if usd is None else round(usd, 8)
