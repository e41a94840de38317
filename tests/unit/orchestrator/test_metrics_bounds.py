"""The daemon's metrics hold up against what models choose (issue 27, F8): label values from
turns are bounded, and a scrape renders its text off the event loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector
from structlog.testing import capture_logs

from orchestrator.observe import metrics_http
from orchestrator.observe.metric_labels import OTHER, SERIES_MAX, VALUE_MAX
from orchestrator.observe.metrics import DaemonMetrics, LiveView, Scrape
from orchestrator.supervision.table import ProcessEntry
from protocol.ids import Address, ProcessKind
from protocol.messages import ToolSample, TurnMetrics

ALPHA = ProcessEntry(address=Address(kind=ProcessKind.AGENT, name="alpha", instance_key="k"))


def labels_of(metrics: DaemonMetrics, family: str, label: str) -> set[str]:
    found = set()
    for metric in metrics.registry.collect():
        for sample in metric.samples:
            if sample.name == family:
                found.add(sample.labels[label])
    return found


def test_only_declared_tools_are_label_values() -> None:
    metrics = DaemonMetrics()
    metrics.on_ready(ALPHA, ["t__ok", "x" * (VALUE_MAX + 1)])
    made_up = [ToolSample(f"made_up_{i}", 1.0, "E_TOOL_NOT_IN_CATALOG") for i in range(50)]
    metrics.on_turn_metrics(ALPHA, TurnMetrics(tools=[ToolSample("t__ok", 1.0), *made_up],
                                               turns={"completed": 1, "nonsense": 1}))  # fmt: skip
    assert labels_of(metrics, "goondan_tool_calls_total", "tool") == {"t__ok", OTHER}
    assert labels_of(metrics, "goondan_tool_call_duration_seconds_count", "tool") == {
        "t__ok",
        OTHER,
    }
    assert labels_of(metrics, "goondan_turns_total", "outcome") == {"completed", OTHER}


def test_each_family_is_capped_and_says_so_once() -> None:
    metrics = DaemonMetrics()
    codes = [ToolSample("t", 1.0, f"E_MADE_UP_{i}") for i in range(SERIES_MAX + 500)]
    with capture_logs() as logs:
        metrics.on_turn_metrics(ALPHA, TurnMetrics(tools=codes, model="m" * 1000,
                                                   input_tokens=5))  # fmt: skip
        metrics.on_turn_metrics(ALPHA, TurnMetrics(tools=codes))
    errors = labels_of(metrics, "goondan_errors_total", "code")
    assert len(errors) == SERIES_MAX + 1 and OTHER in errors
    assert labels_of(metrics, "goondan_tokens_total", "model") == {OTHER}  # too long a name
    capped = [x for x in logs if x["event"] == "metrics_series_capped"]
    assert [x["family"] for x in capped] == ["goondan_errors"]


class Gate(Collector):
    """A collector that renders only once the event loop has run while it renders: on the
    loop's own thread it never could."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.rendering = asyncio.Event()
        self.proceed = threading.Event()
        self.released: list[bool] = []

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        self.loop.call_soon_threadsafe(self.rendering.set)
        self.released.append(self.proceed.wait(timeout=10))
        return iter(())


async def test_a_scrape_is_rendered_while_the_loop_runs() -> None:
    metrics = DaemonMetrics()
    gate = Gate(asyncio.get_running_loop())
    metrics.registry.register(gate)
    sock = metrics_http.listen("127.0.0.1", 0)
    port = sock.getsockname()[1]
    nothing = LiveView(entries=list, mailboxes=list, journal=lambda: (0, 0), dropped=list)
    server = await metrics_http.serve(Scrape(metrics, nothing), sock)
    try:
        async with asyncio.timeout(30), httpx.AsyncClient() as client:
            scrape = asyncio.ensure_future(client.get(f"http://127.0.0.1:{port}/metrics"))
            await gate.rendering.wait()  # the loop runs while the text is rendered
            gate.proceed.set()
            response = await scrape
    finally:
        server.close()
    assert gate.released == [True]
    families = {f.name for f in text_string_to_metric_families(response.text)}
    assert "goondan_tool_calls" in families
