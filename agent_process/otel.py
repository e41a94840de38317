"""Optional OTLP export of the turn/step/tool spans the runtime already records (issue 8).

The runtime-event bus (`agent_process.telemetry`) carries every turn, step and tool call as a
started/finished pair with W3C trace and span ids. When the standard OTEL_* variables ask for
trace export and the OpenTelemetry SDK with an OTLP exporter is installed, `install` subscribes
to the bus and turns each finished pair into one OTel span that keeps OUR ids: a trace seen in
`goondan logs --trace ID` is the same trace in the tracing backend, and a turn started by
another agent's request is a child of that agent's tool span.

The SDK's tracer cannot be told which ids to use, so spans are built directly as
`ReadableSpan`s and handed to a `BatchSpanProcessor`, whose worker thread exports them; the
exporter reads its endpoint, headers, timeout and compression from the OTEL_* variables itself.

Zero cost when not configured: nothing from `opentelemetry` is imported unless the environment
asks for export. Export never affects a turn: the subscriber only queues a span (the processor
drops spans when its queue is full) and any error in building one is logged once and ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import structlog

from agent_process.telemetry import EventBus
from bundles import redact

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
    from opentelemetry.sdk.trace.export import SpanExporter

_log = structlog.get_logger("goondan.otel")

CLOSE_TIMEOUT = 2.0
"""Seconds `close` waits for the last spans to leave; an unreachable collector delays the
agent's exit by at most this long."""
MAX_OPEN_SPANS = 10_000
"""Started spans waiting for their end; beyond this the oldest are forgotten (a turn parked
by a drain never finishes in this process)."""
DEFAULT_SERVICE_NAME = "goondan"
INSTALL_HINT = (
    "pip install 'goondan-daemon[otel]' (opentelemetry-sdk, opentelemetry-exporter-otlp-proto-http)"
)

_STARTS = frozenset({"turn.started", "step.started", "tool.called"})
_ENDS = frozenset(
    {
        "turn.completed",
        "turn.failed",
        "step.completed",
        "step.failed",
        "tool.completed",
        "tool.failed",
    }
)
_FAILED = frozenset({"turn.failed", "step.failed", "tool.failed"})
_USAGE_ATTRIBUTES = {
    "inputTokens": "gen_ai.usage.input_tokens",
    "outputTokens": "gen_ai.usage.output_tokens",
}


def export_requested(environ: Mapping[str, str] = os.environ) -> bool:
    """True when the standard variables ask for OTLP trace export: an endpoint is set,
    OTEL_TRACES_EXPORTER is unset or names `otlp`, and OTEL_SDK_DISABLED is not `true`."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporters and "otlp" not in {name.strip() for name in exporters.split(",")}:
        return False
    return any(
        environ.get(name, "").strip()
        for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


def install(bus: EventBus) -> SpanExport | None:
    """Subscribe an OTLP span export to `bus` when configured; None when not configured or the
    packages are missing (said once in the log, with how to install them)."""
    if not export_requested():
        return None
    try:
        exporter = _exporter(_protocol())
        if exporter is None:
            return None
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        export = SpanExport(BatchSpanProcessor(exporter), _resource(bus))
    except ImportError as exc:
        _log.warning("otel_unavailable", error=str(exc), hint=INSTALL_HINT)
        return None
    except Exception as exc:  # e.g. an OTEL_* value the SDK rejects: the agent runs anyway
        _log.error("otel_config_invalid", error=repr(exc), hint="check the OTEL_* variables")
        return None
    for pattern in ("turn.*", "step.*", "tool.*"):
        bus.on(pattern, export.on_event, owner="otel")
    _route_sdk_logs()
    _log.info("otel_export_enabled", protocol=_protocol())
    return export


class _SdkLogs(logging.Handler):
    """The SDK reports export failures through stdlib logging, which nothing here configures
    (Python would print bare text lines into the JSON log): pass them to structlog, where
    they are rendered like every other line and secrets are masked."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            method = _log.error if record.levelno >= logging.ERROR else _log.warning
            method("otel_sdk", logger=record.name, message=record.getMessage())
        except Exception:
            self.handleError(record)


def _route_sdk_logs() -> None:
    sdk = logging.getLogger("opentelemetry")
    if not any(isinstance(h, _SdkLogs) for h in sdk.handlers):
        sdk.addHandler(_SdkLogs(logging.WARNING))
        sdk.propagate = False


def _protocol() -> str:
    env = os.environ
    value = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", ""
    )
    return value.strip().lower() or "http/protobuf"


def _exporter(protocol: str) -> SpanExporter | None:
    """The OTLP exporter for `protocol`; raise ImportError when its package is missing."""
    if protocol == "grpc":
        try:  # by name: the grpc exporter is optional even where the otel extra is installed
            module = importlib.import_module(
                "opentelemetry.exporter.otlp.proto.grpc.trace_exporter"
            )
        except ImportError:
            _log.warning(
                "otel_grpc_unavailable",
                hint="set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf (and the collector's HTTP "
                "port, usually 4318) or pip install opentelemetry-exporter-otlp-proto-grpc",
            )
            return None
        grpc_exporter: SpanExporter = module.OTLPSpanExporter()
        return grpc_exporter
    if protocol != "http/protobuf":
        _log.warning("otel_protocol_unsupported", protocol=protocol, using="http/protobuf")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def _resource(bus: EventBus) -> Resource:
    """The SDK's resource with service.instance.id = the process address
    (`agent:<name>:<instanceKey>`) and service.name = goondan, unless OTEL_RESOURCE_ATTRIBUTES
    or OTEL_SERVICE_NAME say otherwise (they always win)."""
    from opentelemetry.sdk.resources import OTELResourceDetector, Resource

    ours = Resource(
        {
            "service.name": DEFAULT_SERVICE_NAME,
            "service.instance.id": f"agent:{bus.agent}:{bus.instance_key}",
            "goondan.agent": bus.agent,
            "goondan.instance_key": bus.instance_key,
        }
    )
    return Resource.create().merge(ours).merge(OTELResourceDetector().detect())


class SpanExport:
    """Pairs started/finished runtime events by span id and queues one span per pair."""

    def __init__(self, processor: SpanProcessor, resource: Resource) -> None:
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        self._processor = processor
        self._resource = resource
        self._scope = InstrumentationScope("goondan")
        self._open: dict[str, dict[str, Any]] = {}
        self._failed_once = False
        self._closed = False

    def on_event(self, event: dict[str, Any]) -> None:
        """The bus subscriber: never raises, never blocks (the processor only queues)."""
        if self._closed:
            return
        try:
            self._handle(event)
        except Exception as exc:  # a malformed event must not cost a turn anything
            if not self._failed_once:
                self._failed_once = True
                _log.error("otel_span_failed", event_type=event.get("type"), error=repr(exc))

    def _handle(self, event: dict[str, Any]) -> None:
        kind, span_id = event.get("type"), event.get("spanId")
        if not span_id or not event.get("traceId"):
            return
        if kind in _STARTS:
            if len(self._open) >= MAX_OPEN_SPANS:
                del self._open[next(iter(self._open))]
            self._open[span_id] = event
        elif kind in _ENDS:
            self._processor.on_end(self._span(event, self._open.pop(span_id, None)))

    def _span(self, end: dict[str, Any], start: dict[str, Any] | None) -> ReadableSpan:
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.trace import SpanContext, TraceFlags

        trace_id = int(end["traceId"], 16)
        what = end["type"].partition(".")[0]
        context = SpanContext(
            trace_id,
            int(end["spanId"], 16),
            is_remote=False,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )
        parent_id = end.get("parentSpanId")
        parent = None
        if parent_id:
            # a turn's parent is the span of whoever sent the event: another process
            parent = SpanContext(
                trace_id,
                int(parent_id, 16),
                is_remote=what == "turn",
                trace_flags=TraceFlags(TraceFlags.SAMPLED),
            )
        end_ns = _nanos(end["at"])
        start_ns = _nanos(start["at"]) if start else end_ns - int(end.get("durationMs", 0) * 1e6)
        return ReadableSpan(
            name=f"tool {end.get('toolName')}" if what == "tool" else what,
            context=context,
            parent=parent,
            resource=self._resource,
            attributes=span_attributes(what, end, start),
            instrumentation_scope=self._scope,
            status=_status(end),
            start_time=start_ns,
            end_time=max(end_ns, start_ns),
        )

    async def close(self) -> None:
        """Export what is queued and stop the worker, waiting at most CLOSE_TIMEOUT."""
        if self._closed:
            return
        self._closed = True
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        def shutdown() -> None:
            try:
                self._processor.shutdown()
            except Exception as exc:
                _log.error("otel_shutdown_failed", error=repr(exc))
            finally:
                # the loop may have closed while the collector kept us waiting
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(_resolve, done)

        # a daemon thread, not the default executor: the interpreter must not wait at exit
        # for a collector that does not answer
        threading.Thread(target=shutdown, name="otel-shutdown", daemon=True).start()
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT):
                await done
        except TimeoutError:
            _log.warning("otel_shutdown_slow", waited_s=CLOSE_TIMEOUT)


def span_attributes(what: str, end: dict[str, Any], start: dict[str, Any] | None) -> dict[str, Any]:
    """goondan.* attributes (plus the gen_ai.* names tracing UIs know) of one span."""
    attrs: dict[str, Any] = {
        "goondan.agent": end["agent"],
        "goondan.instance_key": end["instanceKey"],
    }
    for key, name in _COMMON_ATTRIBUTES:
        if end.get(key) is not None:
            attrs[name] = end[key]
    _KIND_ATTRIBUTES[what](attrs, end, start)
    for key, value in (end.get("usage") or {}).items():
        attrs[_USAGE_ATTRIBUTES.get(key, f"goondan.usage.{key}")] = value
    error = end.get("error")
    if error:
        attrs["error.type"] = attrs["goondan.error.code"] = error.get("code", "")
    return attrs


def _turn_attributes(
    attrs: dict[str, Any], end: dict[str, Any], start: dict[str, Any] | None
) -> None:
    event_type = ((start or {}).get("data") or {}).get("eventType")
    if event_type:
        attrs["goondan.event_type"] = event_type
    if end.get("steps") is not None:
        attrs["goondan.steps"] = end["steps"]


def _step_attributes(
    attrs: dict[str, Any], end: dict[str, Any], start: dict[str, Any] | None
) -> None:
    data = end.get("data") or {}
    if data.get("finishReason"):
        attrs["gen_ai.response.finish_reasons"] = [str(data["finishReason"])]
    if data.get("toolCalls") is not None:
        attrs["goondan.tool_calls"] = data["toolCalls"]


def _tool_attributes(
    attrs: dict[str, Any], end: dict[str, Any], start: dict[str, Any] | None
) -> None:
    attrs["gen_ai.operation.name"] = "execute_tool"
    attrs["goondan.tool"] = attrs["gen_ai.tool.name"] = end.get("toolName") or ""
    if end.get("toolCallId"):
        attrs["gen_ai.tool.call.id"] = end["toolCallId"]


_COMMON_ATTRIBUTES = (
    ("turnId", "goondan.turn_id"),
    ("eventId", "goondan.event_id"),
    ("step", "goondan.step"),
    ("status", "goondan.status"),
)
_KIND_ATTRIBUTES: dict[
    str, Callable[[dict[str, Any], dict[str, Any], dict[str, Any] | None], None]
] = {
    "turn": _turn_attributes,
    "step": _step_attributes,
    "tool": _tool_attributes,
}


def _status(end: dict[str, Any]) -> Any:
    from opentelemetry.trace import Status, StatusCode

    if end["type"] not in _FAILED:
        return Status(StatusCode.UNSET)
    error = end.get("error")
    if error:
        description = f"{error.get('code')}: {error.get('message', '')}"
    else:  # step.failed carries the exception's repr in data
        description = str((end.get("data") or {}).get("error", "failed"))
    return Status(StatusCode.ERROR, redact.redact_text(description))


def _resolve(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)


def _nanos(seconds: float) -> int:
    return int(seconds * 1_000_000_000)
