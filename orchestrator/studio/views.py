"""What Studio's trace, graph and chart views show, computed from runtime events (pure).

- A trace's waterfall: turns, steps, the model call of each step, tool calls, and the turns of
  other agents a tool call caused (their parent span is the tool call's, ARCHITECTURE.md §6).
  A step's model call is not an event of its own: it runs from the step's start to its first
  tool call (or the step's end) and carries the step's token usage.
- The swarm graph: who started each turn (`turn.started` names its source), with counts and
  the started turns' latencies.
- Charts over the last hour, by minute: turns, p50/p99 turn latency, tokens; errors by code.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from protocol.jsontypes import JsonObject

_STARTS = {"turn.started": "turn", "step.started": "step", "tool.called": "tool"}
_ENDS = {
    "turn.completed",
    "turn.failed",
    "step.completed",
    "step.failed",
    "tool.completed",
    "tool.failed",
}


@dataclass(slots=True)
class Span:
    id: str
    parent: str | None
    kind: str
    label: str
    agent: str
    instance_key: str
    start: float
    end: float | None = None
    status: str | None = None
    usage: dict[str, int] | None = None
    error: str | None = None
    children: list[Span] = field(default_factory=list)


def _start(event: JsonObject, kind: str) -> Span:
    label = {
        "turn": f"turn {event.get('agent')}",
        "step": f"step {event.get('step')}",
        "tool": str(event.get("toolName")),
    }[kind]
    return Span(
        id=str(event["spanId"]),
        parent=event.get("parentSpanId"),
        kind=kind,
        label=label,
        agent=str(event.get("agent")),
        instance_key=str(event.get("instanceKey")),
        start=float(event["at"]),
    )


def _end(span: Span, event: JsonObject) -> None:
    span.end = float(event["at"])
    duration = event.get("durationMs")
    if isinstance(duration, int | float):
        span.start = span.end - duration / 1000  # the measured duration, not two clocks
    span.status = event.get("status") or event["type"].rpartition(".")[2]
    span.usage = event.get("usage") or span.usage
    error = event.get("error")
    if isinstance(error, dict):
        span.error = str(error.get("code"))


def waterfall(events: Iterable[JsonObject]) -> list[dict[str, Any]]:
    """The rows of one trace's waterfall, parents before children, with depth."""
    spans: dict[str, Span] = {}
    for event in sorted(events, key=lambda e: float(e.get("at") or 0)):
        kind, span_id = _STARTS.get(str(event.get("type"))), event.get("spanId")
        if span_id is None:
            continue
        if kind is not None:
            spans[str(span_id)] = _start(event, kind)
        elif event.get("type") in _ENDS and str(span_id) in spans:
            _end(spans[str(span_id)], event)
    roots: list[Span] = []
    for span in spans.values():
        parent = spans.get(span.parent or "")
        (parent.children if parent is not None else roots).append(span)
    for span in spans.values():
        if span.kind == "step":
            _model_call(span)
    rows: list[dict[str, Any]] = []
    for root in sorted(roots, key=lambda s: s.start):
        _flatten(root, 0, rows)
    return rows


def _model_call(step: Span) -> None:
    tools = sorted((c for c in step.children if c.kind == "tool"), key=lambda s: s.start)
    end = tools[0].start if tools else step.end
    call = Span(
        id=step.id + ":model",
        parent=step.id,
        kind="model",
        label="model call",
        agent=step.agent,
        instance_key=step.instance_key,
        start=step.start,
        end=end,
        status=step.status,
        usage=step.usage,
    )
    step.children.insert(0, call)


def _flatten(span: Span, depth: int, rows: list[dict[str, Any]]) -> None:
    ms = None if span.end is None else round((span.end - span.start) * 1000, 3)
    rows.append(
        {
            "id": span.id,
            "parent": span.parent,
            "kind": span.kind,
            "label": span.label,
            "agent": span.agent,
            "instanceKey": span.instance_key,
            "start": span.start,
            "end": span.end,
            "ms": ms,
            "status": span.status,
            "usage": span.usage,
            "error": span.error,
            "depth": depth,
        }
    )
    for child in sorted(span.children, key=lambda s: s.start):
        _flatten(child, depth + 1, rows)


def graph(events: Iterable[JsonObject], agents: Iterable[str], connectors: Iterable[str]) -> Any:
    """Nodes (agents, connectors, the CLI) and edges source -> agent with counts and latency."""
    started: dict[str, tuple[str, str]] = {}
    durations: dict[tuple[str, str], list[float]] = defaultdict(list)
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for event in events:
        kind = event.get("type")
        data = event.get("data") or {}
        if kind == "turn.started" and isinstance(data, dict) and data.get("source"):
            prefix = {"agent": "agent", "connector": "connector"}.get(str(data.get("sourceKind")))
            prefix = prefix or "cli"
            edge = (f"{prefix}:{data['source']}", f"agent:{event.get('agent')}")
            started[str(event.get("spanId"))] = edge
            counts[edge] += 1
        elif kind in ("turn.completed", "turn.failed") and str(event.get("spanId")) in started:
            duration = event.get("durationMs")
            if isinstance(duration, int | float):
                durations[started[str(event.get("spanId"))]].append(float(duration))
    nodes = {f"agent:{a}" for a in agents} | {f"connector:{c}" for c in connectors}
    for source, target in counts:
        nodes |= {source, target}
    edges = [
        {
            "source": s,
            "target": t,
            "count": n,
            "p50Ms": _pct(durations[(s, t)], 50),
            "p99Ms": _pct(durations[(s, t)], 99),
        }
        for (s, t), n in sorted(counts.items())
    ]
    return {
        "nodes": [
            {"id": n, "kind": n.partition(":")[0], "name": n.partition(":")[2]}
            for n in sorted(nodes)
        ],
        "edges": edges,
    }


def _pct(values: list[float], q: int) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1)], 3)


def charts(events: Iterable[JsonObject], now: float, minutes: int = 60) -> dict[str, Any]:
    """Per minute over the last `minutes`: turns, p50/p99 turn ms, tokens; errors by code."""
    first = math.floor(now / 60) - minutes + 1
    turns: list[list[float]] = [[] for _ in range(minutes)]
    tokens = [0] * minutes
    errors: dict[str, int] = defaultdict(int)
    for event in events:
        slot = math.floor(float(event.get("at") or 0) / 60) - first
        if not 0 <= slot < minutes:
            continue
        kind = event.get("type")
        if kind in ("turn.completed", "turn.failed"):
            turns[slot].append(float(event.get("durationMs") or 0))
        elif kind == "step.completed":
            usage = event.get("usage") or {}
            tokens[slot] += int(usage.get("inputTokens", 0)) + int(usage.get("outputTokens", 0))
        error = event.get("error")
        if kind in ("turn.failed", "tool.failed") and isinstance(error, dict):
            errors[str(error.get("code"))] += 1
    return {
        "minutes": [(first + i) * 60 for i in range(minutes)],
        "turns": [len(t) for t in turns],
        "p50Ms": [_pct(t, 50) for t in turns],
        "p99Ms": [_pct(t, 99) for t in turns],
        "tokens": tokens,
        "errors": dict(sorted(errors.items())),
    }
