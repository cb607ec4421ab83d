"""The server span of every request (OpenTelemetry's ASGI middleware), when tracing is on
(core/tracing.py): a client's `traceparent` is continued, so a job's trace can start in
the client's own. Probes and scrapes are left out unless OTEL_PYTHON_FASTAPI_EXCLUDED_URLS
says otherwise: each would be a trace of its own every few seconds."""

from __future__ import annotations

import os

from fastapi import FastAPI
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

from ampfleet.core.tracing import tracing_on

# Regular expressions searched in the full URL; /v1/jobs/{id}/metrics is traced.
UNTRACED_URLS = r"//[^/]+/(healthz|readyz|metrics)$"


def trace_requests(app: FastAPI) -> None:
    if not tracing_on():
        return
    FastAPIInstrumentor.instrument_app(
        app,
        excluded_urls=os.environ.get("OTEL_PYTHON_FASTAPI_EXCLUDED_URLS", UNTRACED_URLS),
        # A span per ASGI message would be one per event of a live stream.
        exclude_spans=["receive", "send"],
    )
