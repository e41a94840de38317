"""The daemon's Prometheus metrics (`Swarm.spec.observability.metrics`, ARCHITECTURE.md §13).

Two kinds, in one registry of this daemon (no global state):
- counters and histograms the daemon keeps as things happen: spawns, restarts and crashes (from
  the process table's transitions), and what agents' turns did (the `TurnMetrics` deltas each
  agent sends on the idle `status` frame that ends a turn: turns, steps, tool calls, errors,
  durations, tokens), so no agent process is ever scraped;
- gauges and counters read from the daemon's own objects at scrape time (`LiveView`): process
  states, mailbox depths, the ingress journal's lag and the frames the sockets dropped.

The first kind (`DaemonMetrics`) exists before the daemon's objects, which report to it; the
second (`Scrape`) is made from them once they are built, when the endpoint starts serving.

Label values that come from models (tool names, error codes, model names) are bounded
(`orchestrator/observe/metric_labels.py`). A scrape reads the daemon's objects on its loop
(`refresh()`, which snapshots them) and renders the text in a worker thread
(`orchestrator/observe/metrics_http.py`): the loop never renders a large registry.

This module imports prometheus_client; the daemon imports it only when metrics are configured.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from orchestrator.observe.metric_labels import OTHER, KnownTools, SeriesCap, bounded
from orchestrator.supervision.states import ProcessStatus
from orchestrator.supervision.table import ProcessEntry
from protocol.control import DEACTIVATED
from protocol.messages import ToolSample, TurnMetrics, TurnOutcome

TURN_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, float("inf"))
TOOL_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, float("inf"))
S = ProcessStatus
OUTCOMES = frozenset(TurnOutcome)


@dataclass(frozen=True, slots=True)
class LiveView:
    """What the scrape reads from the running daemon (all in its event loop's thread)."""

    entries: Callable[[], Iterable[ProcessEntry]]
    mailboxes: Callable[[], Iterable[tuple[str, int, int]]]
    """(agent, queued, in flight) per mailbox."""
    journal: Callable[[], tuple[int, int]]
    """(events accepted and not finished, events waiting for their append)."""
    dropped: Callable[[], Iterable[tuple[str, str, int]]]
    """(socket, reason, frames) the sockets dropped."""
    journal_stats: Callable[[], Awaitable[dict[str, Any]]] | None = None


class DaemonMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        reg = self.registry
        proc = ["kind", "name"]
        self.spawns = Counter("goondan_process_spawns", "Processes started", proc, registry=reg)
        self.restarts = Counter(
            "goondan_process_restarts",
            "Processes started again after an exit (crash or restart)",
            proc,
            registry=reg,
        )
        self.crashes = Counter(
            "goondan_process_crashes", "Unrequested process exits", proc, registry=reg
        )
        self.turns = Counter(
            "goondan_turns", "Turns ended, by outcome", ["agent", "outcome"], registry=reg
        )
        self.turn_seconds = Histogram(
            "goondan_turn_duration_seconds",
            "Turn latency",
            ["agent"],
            buckets=TURN_BUCKETS,
            registry=reg,
        )
        self.steps = Counter("goondan_steps", "Model steps", ["agent"], registry=reg)
        self.tool_calls = Counter(
            "goondan_tool_calls",
            "Tool calls ended, by status",
            ["agent", "tool", "status"],
            registry=reg,
        )
        self.tool_seconds = Histogram(
            "goondan_tool_call_duration_seconds",
            "Tool call latency",
            ["agent", "tool"],
            buckets=TOOL_BUCKETS,
            registry=reg,
        )
        self.errors = Counter(
            "goondan_errors",
            "Coded errors of turns and tool calls",
            ["agent", "code", "source"],
            registry=reg,
        )
        self.tokens = Counter(
            "goondan_tokens",
            "Model tokens, by model and direction",
            ["agent", "model", "direction"],
            registry=reg,
        )
        self._tools = KnownTools()
        self._caps = {
            name: SeriesCap(name)
            for name in ("goondan_tool_calls", "goondan_tool_call_duration_seconds",
                         "goondan_errors", "goondan_tokens")
        }  # fmt: skip

    def on_ready(self, entry: ProcessEntry, tools: Sequence[str]) -> None:
        """The tools a process declared: the tool label values of its agent."""
        self._tools.declare(entry.address.name, tools)

    def on_transition(self, entry: ProcessEntry, source: S, target: S) -> None:
        labels = (str(entry.address.kind), entry.address.name)
        if target is S.SPAWNING:
            self.spawns.labels(*labels).inc()
            last = entry.last_exit
            if entry.generation > 1 and (last is None or last.reason != DEACTIVATED):
                self.restarts.labels(*labels).inc()  # a reactivation is not a restart
        elif target is S.CRASHED:
            self.crashes.labels(*labels).inc()

    def on_turn_metrics(self, entry: ProcessEntry, report: TurnMetrics) -> None:
        agent = entry.address.name
        for outcome, count in report.turns.items():
            self.turns.labels(agent, outcome if outcome in OUTCOMES else OTHER).inc(count)
        histogram = self.turn_seconds.labels(agent)
        for ms in report.turn_ms:
            histogram.observe(ms / 1000)
        for code, count in report.errors.items():
            self._error(agent, code, "turn").inc(count)
        if report.steps:
            self.steps.labels(agent).inc(report.steps)
        for tool in report.tools:
            self._tool(agent, tool)
        model = bounded(report.model)
        for direction, tokens in (("input", report.input_tokens),
                                  ("output", report.output_tokens)):  # fmt: skip
            if tokens:
                labels = self._capped("goondan_tokens", agent, model, direction)
                self.tokens.labels(*labels).inc(tokens)

    def _tool(self, agent: str, tool: ToolSample) -> None:
        name = self._tools.label(agent, tool.name)
        status = "error" if tool.code else "ok"
        self.tool_calls.labels(*self._capped("goondan_tool_calls", agent, name, status)).inc()
        timed = self._capped("goondan_tool_call_duration_seconds", agent, name)
        self.tool_seconds.labels(*timed).observe(tool.ms / 1000)
        if tool.code:
            self._error(agent, tool.code, "tool").inc()

    def _error(self, agent: str, code: str, source: str) -> Any:
        return self.errors.labels(*self._capped("goondan_errors", agent, bounded(code), source))

    def _capped(self, family: str, agent: str, value: str, *fixed: str) -> tuple[str, ...]:
        """(agent, value, *fixed), or `other` for the value when the family is full."""
        return self._caps[family].admit((agent, value, *fixed), (agent, OTHER, *fixed))


class Scrape:
    """What a scrape renders: the counters, and the daemon's objects read through `view`."""

    def __init__(self, metrics: DaemonMetrics, view: LiveView) -> None:
        self.registry = metrics.registry
        self._live = _Live(view)
        self.registry.register(self._live)

    async def refresh(self) -> None:
        """Before a scrape, on the loop: what must be awaited (the journal's oldest open
        entry), then a snapshot of the daemon's objects, which the rendering thread reads."""
        view = self._live.view
        if view.journal_stats is not None:
            stats = await view.journal_stats()
            self._live.oldest_open = stats.get("oldestOpenAgeSeconds")
        self._live.snapshot = list(self._live.read())


class _Live(Collector):
    def __init__(self, view: LiveView) -> None:
        self.view = view
        self.oldest_open: float | None = None
        self.snapshot: list[Any] = []
        """What `read()` gave on the loop before this scrape: the rendering thread's view."""

    def describe(self) -> list[Any]:
        return []  # read at scrape time: nothing to check at registration

    def collect(self) -> Iterator[Any]:
        return iter(self.snapshot)

    def read(self) -> Iterator[Any]:
        """The families of the daemon's objects (on the loop's thread: they are its)."""
        view = self.view
        states = GaugeMetricFamily(
            "goondan_processes",
            "Processes by kind, name and state",
            labels=["kind", "name", "state"],
        )
        tally = Tally(
            (str(e.address.kind), e.address.name, e.info().status) for e in view.entries()
        )
        for (kind, name, state), count in sorted(tally.items()):
            states.add_metric([kind, name, state], count)
        yield states
        yield from _mailboxes(view)
        unfinished, appending = view.journal()
        yield GaugeMetricFamily(
            "goondan_journal_unfinished_events",
            "Accepted events whose turn has not finished",
            value=unfinished,
        )
        yield GaugeMetricFamily(
            "goondan_journal_appending_events",
            "Events waiting for their journal append",
            value=appending,
        )
        if self.oldest_open is not None:
            yield GaugeMetricFamily(
                "goondan_journal_oldest_unfinished_seconds",
                "Age of the oldest unfinished journaled event",
                value=self.oldest_open,
            )
        dropped = CounterMetricFamily(
            "goondan_dropped_frames", "Frames the sockets dropped", labels=["socket", "reason"]
        )
        for socket, reason, count in view.dropped():
            dropped.add_metric([socket, reason], count)
        yield dropped


def _mailboxes(view: LiveView) -> Iterator[Any]:
    queued: Tally[str] = Tally()
    inflight: Tally[str] = Tally()
    for agent, waiting, running in view.mailboxes():
        queued[agent] += waiting
        inflight[agent] += running
    q = GaugeMetricFamily(
        "goondan_mailbox_queued_events",
        "Events waiting for their process, by agent",
        labels=["agent"],
    )
    f = GaugeMetricFamily(
        "goondan_mailbox_inflight_events",
        "Events delivered and not finished, by agent",
        labels=["agent"],
    )
    for agent in sorted(queued):
        q.add_metric([agent], queued[agent])
        f.add_metric([agent], inflight[agent])
    yield q
    yield f
