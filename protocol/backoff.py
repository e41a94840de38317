"""Exponential backoff: the one formula every retry loop in goondan waits by.

It lives in `protocol` (stdlib only) because its callers span every layer: the daemon's
crash-loop policy and cluster link, an agent process's MCP reconnects, and the chat connectors
under `bundles/base/`, which may import only `bundles.sdk` and `protocol`. Each caller keeps its
own first delay and cap; only the arithmetic is shared.
"""

from __future__ import annotations

import math
import random


def delay(attempt: int, *, first: float, cap: float, jitter: bool = False) -> float:
    """Seconds to wait before retry number `attempt` (0 = the first retry): `first` doubled
    `attempt` times, never more than `cap`, for any attempt count (a counter that has run for
    months does not overflow). With `jitter`, a uniform draw from the upper half of that delay,
    so many clients that failed together do not retry together."""
    try:  # ldexp is exact doubling; it raises, never rounds, once the float would overflow
        doubled = math.ldexp(first, max(attempt, 0))
    except OverflowError:
        doubled = math.inf
    wait = float(min(doubled, cap))  # float: a YAML cap may be an int
    if jitter:
        wait = random.uniform(wait / 2, wait)  # spreads retries; not a secret
    return wait
