"""What a model call costs: tokens times `Model.spec.pricing` (US dollars per million tokens).

`input_tokens` counts every input token, those read from the provider's prompt cache included;
`cached_input_tokens` is that cached part, priced at `cachedInputPerMTok` (the input price when
unset). Pure, so the agent that makes the call and anything reporting on it agree.
"""

from __future__ import annotations

from bundles.kinds import Pricing

PER = 1_000_000


def cost_usd(pricing: Pricing | None, input_tokens: int, output_tokens: int, cached: int) -> float:
    if pricing is None:
        return 0.0
    cached = max(0, min(cached, input_tokens))
    cached_price = pricing.cached_input_per_m_tok
    if cached_price is None:
        cached_price = pricing.input_per_m_tok
    total = (
        (input_tokens - cached) * pricing.input_per_m_tok
        + cached * cached_price
        + output_tokens * pricing.output_per_m_tok
    )
    return total / PER
