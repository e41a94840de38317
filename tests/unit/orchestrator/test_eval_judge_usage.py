"""The judge worker's usage, read by the eval's client and priced (evals/judge.py, cost.py)."""

from __future__ import annotations

import pytest

from bundles.kinds import Pricing
from orchestrator.evals.cost import usage_cost
from orchestrator.evals.judge import JudgeFailed, _verdict

PRICE = Pricing(input_per_m_tok=1_000_000, output_per_m_tok=2_000_000, cached_input_per_m_tok=0)


def test_a_verdict_carries_its_usage_and_only_counts_that_are_counts() -> None:
    usage = {"inputTokens": 3, "outputTokens": 2, "cachedInputTokens": 1, "bogus": True,
             "negative": -5, "text": "9"}  # fmt: skip
    verdict = _verdict({"pass": True, "reason": "ok", "usage": usage})
    assert verdict.usage == {"inputTokens": 3, "outputTokens": 2, "cachedInputTokens": 1}
    assert verdict.tokens == 5  # the cached part is inside inputTokens
    assert usage_cost(PRICE, verdict.usage) == 2 + 4  # 2 uncached in, 2 out; cached free


def test_a_failed_judgment_keeps_the_tokens_it_spent() -> None:
    answer = {"error": {"code": "E_EVAL_JUDGE", "message": "not JSON"},
              "usage": {"inputTokens": 1, "outputTokens": 1}}  # fmt: skip
    with pytest.raises(JudgeFailed) as caught:
        _verdict(answer)
    assert caught.value.usage == {"inputTokens": 1, "outputTokens": 1}
    with pytest.raises(JudgeFailed) as caught:
        _verdict({"error": {"message": "the worker could not build the Model"}})
    assert caught.value.usage is None  # no call made: nothing spent


def test_no_pricing_is_unknown_not_free() -> None:
    assert usage_cost(None, {"inputTokens": 10}) is None
    assert usage_cost(PRICE, {"inputTokens": "10", "outputTokens": None}) == 0.0
