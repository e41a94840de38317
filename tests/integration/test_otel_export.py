"""OTLP export through a real daemon: agent processes inherit the OTEL_* variables, and one
`agents__request` is one trace across two processes (fixture: tests/fixtures/agents)."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator

import pytest

from tests.integration.conftest import StartDaemon
from tests.integration.harness import REPO
from tests.unit.agent_process.otlp_collector import Collector, attrs


@pytest.fixture
def collector() -> Iterator[Collector]:
    pytest.importorskip("opentelemetry.sdk.trace")
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    server = Collector()
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def test_a_request_between_agents_is_one_exported_trace(
    start_daemon: StartDaemon, collector: Collector
) -> None:
    env = {k: "" for k in os.environ if k.startswith("OTEL_")}
    env.update(OTEL_EXPORTER_OTLP_ENDPOINT=collector.url, NO_PROXY="127.0.0.1")
    async with asyncio.timeout(45):
        daemon = await start_daemon(REPO / "tests" / "fixtures" / "agents", swarm="agents", env=env)
        reply = await daemon.send("sync hello", "caller")
        assert reply.ok, reply.error
        daemon.signal(signal.SIGTERM)  # agents drain: each runtime flushes its spans on close
        assert await daemon.wait() == 0
    spans = {span.span_id.hex(): (resource, span) for resource, span in collector.spans()}
    instances = {r["service.instance.id"] for r, _ in spans.values()}
    assert instances == {"agent:caller:agents", "agent:worker:agents"}
    assert len({s.trace_id for _, s in spans.values()}) == 1
    (request,) = [s for _, s in spans.values() if s.name == "tool agents__request"]
    (worker_turn,) = [
        s
        for r, s in spans.values()
        if s.name == "turn" and r["service.instance.id"] == "agent:worker:agents"
    ]
    # the worker's turn is a child of the caller's tool span, exported by another process
    assert worker_turn.parent_span_id == request.span_id
    assert attrs(worker_turn)["goondan.agent"] == "worker"
    assert request.start_time_unix_nano <= worker_turn.start_time_unix_nano
    assert worker_turn.end_time_unix_nano <= request.end_time_unix_nano
