"""A case's cost from its instance's model.usage events (orchestrator/evals/cost.py)."""

from __future__ import annotations

import json
from pathlib import Path

from bundles.kinds import Pricing
from orchestrator.evals.cost import case_cost
from protocol.endpoints import StateLayout

PRICE = Pricing(input_per_m_tok=1_000_000, output_per_m_tok=2_000_000)


def _events(layout: StateLayout, agent: str, lines: list[bytes]) -> None:
    path = layout.instance_paths("s", "k/../1", agent).runtime_events_jsonl
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\n".join(lines))


def _usage(model: str, given: int, got: int) -> bytes:
    data = {"model": model, "inputTokens": given, "outputTokens": got}
    return json.dumps({"type": "model.usage", "data": data}).encode()


def test_every_agent_priced_and_a_torn_line_skipped(tmp_path: Path) -> None:
    layout = StateLayout.from_env(tmp_path)
    _events(layout, "a", [_usage("m", 2, 1), b'{"type": "turn.ended"}', b'{"type": "model.u'])
    _events(layout, "b", [_usage("m", 1, 0)])
    assert case_cost(layout, "s", "k/../1", {"m": PRICE}) == 5.0


def test_unknown_when_a_model_has_no_pricing_or_nothing_was_called(tmp_path: Path) -> None:
    layout = StateLayout.from_env(tmp_path)
    assert case_cost(layout, "s", "k/../1", {"m": PRICE}) is None
    _events(layout, "a", [_usage("m", 2, 1), _usage("free", 5, 5)])
    assert case_cost(layout, "s", "k/../1", {"m": PRICE, "free": None}) is None
    assert case_cost(layout, "s", "k/../1", {"m": PRICE}) is None  # a Model not in the bundle
