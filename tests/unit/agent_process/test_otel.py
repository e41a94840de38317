"""OTLP export of turn/step/tool spans: a real runtime turn against a local OTLP/HTTP collector.

The export tests need `opentelemetry-sdk` and `opentelemetry-exporter-otlp-proto-http` (the
`otel` extra) and skip without them; the configuration rules and "not configured imports
nothing" run everywhere.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from agent_process import otel
from agent_process.telemetry import EventBus
from protocol.messages import TurnOutcome
from tests.unit.agent_process import builders as b
from tests.unit.agent_process.helpers import TIMEOUT, event, make_runtime
from tests.unit.agent_process.otlp_collector import Collector, attrs

REPO = Path(__file__).resolve().parents[3]
ADD = {
    "name": "add",
    "parameters": b.params(["a", "b"], a={"type": "integer"}, b={"type": "integer"}),
}
FAIL = {"name": "fail_coded", "parameters": {"type": "object"}}
SCRIPT: list[dict[str, Any]] = [
    {
        "match": "go",
        "toolCalls": [
            {"name": "calc__add", "args": {"a": 1, "b": 2}},
            {"name": "calc__fail_coded", "args": {}},
        ],
    },
    {"match": "go", "afterTool": "*", "reply": "ok"},
    # a model that keeps calling tools: the second turn fails with E_AGENT_MAX_STEPS
    {"match": "loop", "toolCalls": [{"name": "calc__add", "args": {"a": 1, "b": 1}}]},
    {
        "match": "loop",
        "afterTool": "*",
        "toolCalls": [{"name": "calc__add", "args": {"a": 1, "b": 1}}],
    },
]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c", "OTEL_TRACES_EXPORTER": "console,otlp"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c", "OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c", "OTEL_SDK_DISABLED": "TRUE"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c", "OTEL_SDK_DISABLED": "false"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, False),  # otlp asked for, but no endpoint to send to
    ],
)
def test_export_follows_the_standard_variables(env: dict[str, str], expected: bool) -> None:
    assert otel.export_requested(env) is expected


def test_configured_without_the_packages_warns_once_and_exports_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_PROTOCOL", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", raising=False)
    # None in sys.modules makes the import fail, whether or not the package is installed
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    bus = EventBus(None, agent="a", instance_key="k")
    with structlog.testing.capture_logs() as logs:
        assert otel.install(bus) is None
    assert not bus.active  # nothing subscribed
    (warning,) = [e for e in logs if e["event"] == "otel_unavailable"]
    assert warning["log_level"] == "warning"
    assert "goondan-daemon[otel]" in warning["hint"]


NOT_CONFIGURED = """
import asyncio, os, sys
from tests.unit.agent_process import builders as b
from tests.unit.agent_process.helpers import make_runtime, turn

async def main() -> None:
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
    disabled = [{"OTEL_SDK_DISABLED": "true"}, {"OTEL_TRACES_EXPORTER": "none"}]
    for env in ({}, *({**endpoint, **d} for d in disabled)):
        os.environ.update(env)
        rt = await make_runtime(b.scripted(), b.agent())
        try:
            assert (await turn(rt, "hi")).text == "hi"
        finally:
            await rt.close()
        for name in env:
            del os.environ[name]
    print(sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry"))

asyncio.run(main())
"""


async def test_not_configured_imports_no_opentelemetry() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    async with asyncio.timeout(TIMEOUT * 2):
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            textwrap.dedent(NOT_CONFIGURED),
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    assert out.decode().strip().splitlines()[-1] == "[]"


# -- with the SDK -----------------------------------------------------------------------------


@pytest.fixture
def collector(monkeypatch: pytest.MonkeyPatch) -> Iterator[Collector]:
    pytest.importorskip("opentelemetry.sdk.trace")
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")
    for name in [k for k in os.environ if k.startswith("OTEL_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    server = Collector()
    server.start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", server.url)
    try:
        yield server
    finally:
        server.stop()


def calc() -> Any:
    return b.tool("calc", "tools/basic.py", [ADD, FAIL])


async def test_turn_step_and_tool_spans_arrive_with_our_ids(collector: Collector) -> None:
    rt = await make_runtime(
        b.scripted(script=SCRIPT),
        b.agent(tools=["calc"]),
        calc(),
        b.swarm("s", agents=["a"], max_steps=2),
    )
    first, second = event("go"), event("loop")
    try:
        async with asyncio.timeout(TIMEOUT):
            assert (await rt.run_turn(first)).outcome is TurnOutcome.COMPLETED
            assert (await rt.run_turn(second)).outcome is TurnOutcome.MAX_STEPS
    finally:
        async with asyncio.timeout(TIMEOUT):
            await rt.close()  # flushes the batch processor: every span has arrived
    assert set(collector.paths) == {"/v1/traces"}
    received = collector.spans()
    resource = received[0][0]
    assert resource["service.name"] == "goondan"
    assert resource["service.instance.id"] == "agent:a:k1"
    spans = {span.span_id.hex(): span for _, span in received}
    recorded = [json.loads(x) for x in rt.paths.runtime_events_jsonl.read_text().splitlines()]
    ends = [e for e in recorded if e["type"].endswith((".completed", ".failed"))]
    # every finished turn/step/tool became exactly one span with the runtime's ids and parent
    assert len(spans) == len(received) == len(ends) == 2 + 4 + 4
    for end in ends:
        span = spans[end["spanId"]]
        assert span.trace_id.hex() == end["traceId"]
        assert span.parent_span_id.hex() == end["parentSpanId"]
        assert span.end_time_unix_nano >= span.start_time_unix_nano > 0
        assert attrs(span)["goondan.agent"] == "a"
        assert attrs(span)["goondan.instance_key"] == "k1"
    turns = {s.trace_id.hex(): s for s in spans.values() if s.name == "turn"}
    assert set(turns) == {first.trace.trace_id, second.trace.trace_id}
    turn_ok, turn_failed = turns[first.trace.trace_id], turns[second.trace.trace_id]
    # a turn is the child of the span that sent its event (another process's span)
    assert turn_ok.parent_span_id.hex() == first.trace.span_id
    by_parent: dict[str, list[Any]] = {}
    for span in spans.values():
        by_parent.setdefault(span.parent_span_id.hex(), []).append(span)
    steps = by_parent[turn_ok.span_id.hex()]
    assert [s.name for s in steps] == ["step", "step"]
    first_step = min(steps, key=lambda s: attrs(s)["goondan.step"])
    tools = sorted(by_parent[first_step.span_id.hex()], key=lambda s: s.start_time_unix_nano)
    assert [s.name for s in tools] == ["tool calc__add", "tool calc__fail_coded"]
    add, failed = tools
    assert first_step.start_time_unix_nano <= add.start_time_unix_nano
    assert failed.end_time_unix_nano <= first_step.end_time_unix_nano
    assert attrs(add)["goondan.tool"] == "calc__add"
    assert attrs(add)["gen_ai.tool.call.id"]
    assert add.status.code == 0  # unset
    assert attrs(failed)["goondan.error.code"] == "E_TOOL_PATH_ESCAPE"
    assert failed.status.code == 2  # error
    assert failed.status.message.startswith("E_TOOL_PATH_ESCAPE: nope")
    assert attrs(first_step)["gen_ai.usage.input_tokens"] > 0
    ok = attrs(turn_ok)
    assert ok["goondan.status"] == "completed" and ok["goondan.steps"] == 2
    assert ok["goondan.event_type"] == "user.input"
    assert ok["gen_ai.usage.output_tokens"] > 0
    assert turn_ok.status.code == 0
    assert turn_failed.status.code == 2
    assert turn_failed.status.message.startswith("E_AGENT_MAX_STEPS")
    assert attrs(turn_failed)["goondan.status"] == "max_steps"


async def test_service_name_and_resource_attributes_come_from_the_environment(
    collector: Collector, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_SERVICE_NAME", "support-bot")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
    rt = await make_runtime(b.scripted(), b.agent())
    try:
        async with asyncio.timeout(TIMEOUT):
            await rt.run_turn(event("hi"))
    finally:
        async with asyncio.timeout(TIMEOUT):
            await rt.close()
    (resource, span), *steps = collector.spans()
    assert resource["service.name"] == "support-bot"
    assert resource["deployment.environment"] == "test"
    assert resource["service.instance.id"] == "agent:a:k1"
    assert sorted([span.name, *(s.name for _, s in steps)]) == ["step", "turn"]


async def test_an_unreachable_collector_does_not_affect_turns(
    collector: Collector, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    rt = await make_runtime(b.scripted(script=SCRIPT), b.agent(tools=["calc"]), calc())
    try:
        async with asyncio.timeout(TIMEOUT):
            result = await rt.run_turn(event("go"))
        assert result.outcome is TurnOutcome.COMPLETED and result.text == "ok"
    finally:
        async with asyncio.timeout(otel.CLOSE_TIMEOUT + TIMEOUT):
            await rt.close()  # bounded by CLOSE_TIMEOUT even though nothing answers
    assert collector.requests == []


def test_span_without_a_recorded_start_and_malformed_events() -> None:
    pytest.importorskip("opentelemetry.sdk.trace")
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    export = otel.SpanExport(SimpleSpanProcessor(memory), Resource({"service.name": "t"}))
    export.on_event({"type": "tool.completed", "traceId": "zz", "spanId": "01"})  # not hex
    export.on_event({"type": "tool.completed"})  # no ids: not a span
    # a step whose start was recorded by an earlier process: start = end - duration
    trace_id, span_id = "ab" * 16, "cd" * 8
    export.on_event(
        {
            "type": "step.failed",
            "at": 100.0,
            "agent": "a",
            "instanceKey": "k",
            "traceId": trace_id,
            "spanId": span_id,
            "durationMs": 250.0,
            "step": 3,
            "data": {"error": "RuntimeError('boom')"},
        }
    )
    (span,) = memory.get_finished_spans()
    assert span.context is not None and span.context.trace_id == int(trace_id, 16)
    assert span.parent is None
    assert span.start_time == 99_750_000_000 and span.end_time == 100_000_000_000
    assert span.status.description == "RuntimeError('boom')"
    assert span.attributes is not None and span.attributes["goondan.step"] == 3


async def test_sdk_log_records_become_structured_log_lines(
    collector: Collector, monkeypatch: pytest.MonkeyPatch
) -> None:
    export = otel.install(EventBus(None, agent="a", instance_key="k"))
    assert export is not None
    with structlog.testing.capture_logs() as logs:
        logging.getLogger("opentelemetry.exporter.x").warning("Failed to export %s", "batch")
    assert logs == [
        {
            "event": "otel_sdk",
            "log_level": "warning",
            "logger": "opentelemetry.exporter.x",
            "message": "Failed to export batch",
        }
    ]
    async with asyncio.timeout(TIMEOUT):
        await export.close()


def test_grpc_without_its_exporter_and_a_failing_exporter_leave_the_agent_running(
    collector: Collector, monkeypatch: pytest.MonkeyPatch
) -> None:
    bus = EventBus(None, agent="a", instance_key="k")
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.grpc.trace_exporter", None)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    with structlog.testing.capture_logs() as logs:
        assert otel.install(bus) is None
    assert [e["event"] for e in logs] == ["otel_grpc_unavailable"]
    assert "http/protobuf" in logs[0]["hint"]

    from opentelemetry.exporter.otlp.proto.http import trace_exporter

    def broken(*args: object, **kwargs: object) -> None:
        raise ValueError("bad OTEL_EXPORTER_OTLP_HEADERS")

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setattr(trace_exporter, "OTLPSpanExporter", broken)
    with structlog.testing.capture_logs() as logs:
        assert otel.install(bus) is None
    assert [e["event"] for e in logs] == ["otel_config_invalid"]
    assert not bus.active
