"""What a case cost in US dollars: the usage its instance recorded, priced by the bundle.

Every model call of an agent is a `model.usage` runtime event in its instance's
`messages/runtime-events.jsonl` (ARCHITECTURE.md §6, Models), written before the reply leaves
the agent. The price is the Model's `spec.pricing` (`bundles/pricing.py`, the one function the
agents and budgets use too). A case whose instance called a Model without `pricing` has no cost
(None, shown blank): zero would claim it was free.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from bundles.kinds import Kind, Pricing
from bundles.model import Bundle
from bundles.pricing import cost_usd
from protocol.endpoints import StateLayout, path_segment

Prices = Mapping[str, Pricing | None]
"""A Model's name -> its pricing (None: the Model has none)."""

MAX_EVENTS_BYTES = 64 * 1024 * 1024
"""A runtime-events file bigger than this is not read for a cost (the case shows none)."""


def prices_of(bundle: Bundle) -> dict[str, Pricing | None]:
    return {res.name: res.spec.pricing for res in bundle.of_kind(Kind.MODEL)}


def _usages(layout: StateLayout, swarm: str, key: str) -> list[dict[str, Any]] | None:
    """The `model.usage` data of every agent of the instance; None when a file is unreadable."""
    found: list[dict[str, Any]] = []
    instance = layout.swarm_instances_dir(swarm) / path_segment(key)
    for path in sorted(instance.glob("*/messages/runtime-events.jsonl")):
        try:
            if path.stat().st_size > MAX_EVENTS_BYTES:
                return None
            lines = path.read_bytes().splitlines()
        except OSError:
            return None
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a torn last line of a killed agent
            if isinstance(event, dict) and event.get("type") == "model.usage":
                data = event.get("data")
                found.append(data if isinstance(data, dict) else {})
    return found


def _int(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key)
    return value if isinstance(value, int) and value >= 0 else 0


def usage_cost(pricing: Pricing | None, data: Mapping[str, Any]) -> float | None:
    """One call's usage (`inputTokens`, `outputTokens`, `cachedInputTokens`) in USD; None when
    its Model has no pricing."""
    if pricing is None:
        return None
    return cost_usd(pricing, _int(data, "inputTokens"), _int(data, "outputTokens"),
                    _int(data, "cachedInputTokens"))  # fmt: skip


def case_cost(layout: StateLayout, swarm: str, key: str, prices: Prices) -> float | None:
    """The instance's cost in USD; None when it made no model call, a call's Model has no
    pricing, or its usage cannot be read."""
    usages = _usages(layout, swarm, key)
    if not usages:
        return None
    total = 0.0
    for data in usages:
        usd = usage_cost(prices.get(str(data.get("model"))), data)
        if usd is None:
            return None
        total += usd
    return total
