"""Bounded label values for the daemon's metrics (issue 27, F8).

A label value that an agent's turn reports comes, in the end, from a model: the name of a tool
it chose to call, an error code, a model name. Unbounded, a model calling 2,000 made-up tools
made 18,000 series and a 73.5 MB scrape, and every series lives as long as the daemon. So:
- a tool is named only when the agent's process declared it in its `ready` frame (its catalog:
  the Tool resources' exports and the tools its extensions registered); any other name is
  `other`. An agent keeps at most `TOOLS_PER_AGENT` names;
- a value longer than `VALUE_MAX` characters is `other`;
- each family holds at most `SERIES_MAX` series of such values: a new one beyond it is counted
  under `other` (whose series are bounded by the agents and the fixed labels), and the first
  time, `metrics_series_capped` is logged once for the family.
"""

from __future__ import annotations

from collections.abc import Iterable

import structlog

OTHER = "other"
SERIES_MAX = 1000
VALUE_MAX = 128
TOOLS_PER_AGENT = 1000
log = structlog.get_logger("goondan.metrics")


def bounded(value: str) -> str:
    """`value`, or `other` when it is too long to be a label."""
    return value if len(value) <= VALUE_MAX else OTHER


class KnownTools:
    """The tool names each agent declared at `ready`: the only tool label values."""

    def __init__(self) -> None:
        self._names: dict[str, set[str]] = {}

    def declare(self, agent: str, tools: Iterable[str]) -> None:
        known = self._names.setdefault(agent, set())
        for name in tools:
            if len(known) >= TOOLS_PER_AGENT:
                return
            if len(name) <= VALUE_MAX:
                known.add(name)

    def label(self, agent: str, tool: str) -> str:
        return tool if tool in self._names.get(agent, ()) else OTHER


class SeriesCap:
    """At most `limit` distinct label sets for one family; past it, a new one falls back."""

    def __init__(self, family: str, limit: int = SERIES_MAX) -> None:
        self.family = family
        self.limit = limit
        self._seen: set[tuple[str, ...]] = set()
        self._warned = False

    def admit(self, labels: tuple[str, ...], fallback: tuple[str, ...]) -> tuple[str, ...]:
        """`labels` when the family has them or room for them, else `fallback` (`other` in
        the place of the values from the model)."""
        if labels in self._seen:
            return labels
        if len(self._seen) < self.limit:
            self._seen.add(labels)
            return labels
        if not self._warned:
            self._warned = True
            log.warning("metrics_series_capped", family=self.family, limit=self.limit,
                        label_value=OTHER)  # fmt: skip
        return fallback
