"""A tiny OTLP/HTTP trace collector on 127.0.0.1 for the OTel export tests.

It decodes every POST /v1/traces with `opentelemetry-proto` (a dependency of the OTLP
exporter): import this module only after `pytest.importorskip` found the exporter.
"""

from __future__ import annotations

import gzip
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Collector:
    """An OTLP/HTTP trace receiver on 127.0.0.1: decodes every POST /v1/traces."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as pb

        self.requests: list[Any] = []
        self.paths: list[str] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = pb.ExportTraceServiceRequest()
                request.ParseFromString(body)
                collector.paths.append(self.path)
                collector.requests.append(request)
                reply = pb.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def spans(self) -> list[tuple[dict[str, Any], Any]]:
        """(resource attributes, span) of every span received."""
        out: list[tuple[dict[str, Any], Any]] = []
        for request in self.requests:
            for rs in request.resource_spans:
                resource = {a.key: _value(a.value) for a in rs.resource.attributes}
                out.extend((resource, span) for ss in rs.scope_spans for span in ss.spans)
        return out


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind)


def attrs(span: Any) -> dict[str, Any]:
    return {a.key: _value(a.value) for a in span.attributes}
