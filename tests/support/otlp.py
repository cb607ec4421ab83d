"""A tiny OTLP/HTTP trace receiver: what a collector would be to the processes under test.

It takes `POST /v1/traces` (protobuf, gzipped or not), decodes every span with
opentelemetry-proto and keeps it, and answers as a collector does.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str  # "" for a root span
    resource: dict[str, Any]
    attributes: dict[str, Any]
    events: tuple[str, ...]
    start_ns: int
    end_ns: int
    status_code: int  # 0 unset, 1 ok, 2 error

    @property
    def role(self) -> str:
        return str(self.resource.get("ampfleet.role", ""))


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


def _decode(body: bytes) -> list[ReceivedSpan]:
    request = ExportTraceServiceRequest.FromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    ReceivedSpan(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        resource=resource,
                        attributes={a.key: _value(a.value) for a in span.attributes},
                        events=tuple(event.name for event in span.events),
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        status_code=span.status.code,
                    )
                )
    return spans


@dataclass
class Receiver:
    url: str
    spans: list[ReceivedSpan] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def received(self) -> list[ReceivedSpan]:
        with self.lock:
            return list(self.spans)

    def wait_for(
        self, predicate: Callable[[list[ReceivedSpan]], bool], *, timeout: float, what: str
    ) -> list[ReceivedSpan]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate(spans := self.received()):
                return spans
            time.sleep(0.2)
        names = sorted({s.name for s in self.received()})
        raise AssertionError(f"timed out waiting for {what}; spans received: {names}")


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    """A receiver on a loopback port; its `url` is an OTEL_EXPORTER_OTLP_ENDPOINT."""
    kept: list[ReceivedSpan] = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path != "/v1/traces":
                self.send_error(404)
                return
            spans = _decode(body)
            with lock:
                kept.extend(spans)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="otlp-receiver", daemon=True)
    thread.start()
    try:
        yield Receiver(f"http://127.0.0.1:{server.server_port}", kept, lock)
    finally:
        server.shutdown()
        server.server_close()
