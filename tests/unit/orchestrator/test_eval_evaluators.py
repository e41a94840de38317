"""Each evaluator passes and fails (orchestrator/evals/evaluators.py)."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.evals.evaluators import Outcome, evaluate

OUT = Outcome(reply='{"ticket": 12}', tokens=50, latency_ms=300.0)


@pytest.mark.parametrize(
    ("kind", "passing", "failing"),
    [
        ("equals", '{"ticket": 12}', "x"),
        ("contains", "ticket", "refund"),
        ("regex", r"\d+", r"^ticket"),
        ("jsonSchema", {"type": "object", "required": ["ticket"]},
         {"type": "object", "properties": {"ticket": {"type": "string"}}}),
        ("maxTokens", 50, 49),
        ("maxLatencyMs", 300, 299),
    ],
)  # fmt: skip
def test_each_evaluator_passes_and_fails(kind: str, passing: Any, failing: Any) -> None:
    assert evaluate({kind: passing}, OUT) is None
    failed = evaluate({kind: failing}, OUT)
    assert failed is not None and failed[0] == kind and failed[1]


def test_a_reply_that_is_not_json_fails_json_schema() -> None:
    out = Outcome(reply="not json", tokens=1, latency_ms=1.0)
    assert evaluate({"jsonSchema": {"type": "object"}}, out) == (
        "jsonSchema",
        "the reply is not JSON",
    )


def test_no_usage_fails_max_tokens() -> None:
    out = Outcome(reply="x", tokens=None, latency_ms=1.0)
    failed = evaluate({"maxTokens": 10}, out)
    assert failed is not None and failed[0] == "maxTokens"


def test_a_failed_turn_fails_before_any_evaluator() -> None:
    out = Outcome(reply="", tokens=None, latency_ms=1.0, error="E_MODEL: down")
    assert evaluate({"contains": ""}, out) == ("turn", "E_MODEL: down")


CALLED = Outcome(
    reply="ok",
    tokens=1,
    latency_ms=1.0,
    tool_calls=(("tickets__create", {"priority": "high", "title": "printer"}),),
    steps=3,
)


@pytest.mark.parametrize(
    ("kind", "passing", "failing"),
    [
        ("toolCalled", {"name": "tickets__create", "args": {"priority": "high"}},
         {"name": "tickets__create", "args": {"priority": "low"}}),
        ("toolCalled", {"name": "tickets__create"}, {"name": "tickets__close"}),
        ("toolNotCalled", {"name": "tickets__close"}, {"name": "tickets__create"}),
        ("toolNotCalled", {"name": "tickets__create", "args": {"priority": "low"}},
         {"name": "tickets__create", "args": {"title": "printer"}}),
        ("maxSteps", 3, 2),
    ],
)  # fmt: skip
def test_tool_and_step_evaluators_pass_and_fail(kind: str, passing: Any, failing: Any) -> None:
    assert evaluate({kind: passing}, CALLED) is None
    failed = evaluate({kind: failing}, CALLED)
    assert failed is not None and failed[0] == kind and failed[1]
