"""Traces: OpenTelemetry spans of a job's way from its submit to its ranks' first step.

One trace per job, however many processes it crosses: the trace context travels with the job,
not with a connection. The API stores its submit's context in the job row (`trace_context`);
the scheduler continues it when it places an attempt and hands its placement's context on
in the start message; the node agent continues that when it launches the ranks, and reports
their first step from the records it ingests (ranks run without network: they export
nothing). What is stored is the W3C trace context alone (`traceparent`, `tracestate`), never
a client's baggage.

Configured by the standard OTEL_* variables, read here, by the SDK and by the API's request
spans (api/request_traces.py). Off unless OTEL_TRACES_EXPORTER names an exporter or an OTLP
endpoint is set: the no-op tracer then records nothing and nothing is stored. Spans leave
from a background thread (BatchSpanProcessor): a collector that is slow or gone costs
dropped spans and a warning in the log, never a request. Only OTLP over HTTP/protobuf is
shipped.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime

from opentelemetry import context, trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased
from opentelemetry.trace import Span
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

log = logging.getLogger(__name__)
tracer = trace.get_tracer("ampfleet")
_W3C = TraceContextTextMapPropagator()
OTLP_PROTOCOL = "http/protobuf"
_configured = False


def exporter_names(environ: Mapping[str, str]) -> list[str]:
    """The span exporters the OTEL_* variables ask for; none: tracing is off."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    named = environ.get("OTEL_TRACES_EXPORTER", "")
    names = [name.strip().lower() for name in named.split(",") if name.strip()]
    if not names and (
        environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    ):
        names = ["otlp"]
    return [] if "none" in names else names


def otlp_problem(environ: Mapping[str, str]) -> str | None:
    """Why the OTLP exporter cannot be made as configured; None when it can."""
    protocol = (
        environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or OTLP_PROTOCOL
    )
    if protocol != OTLP_PROTOCOL:
        return f"OTLP protocol {protocol!r} is not supported here, only {OTLP_PROTOCOL!r}"
    return None


def resource_of(role: str) -> Resource:
    """OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES as the SDK reads them; a process that
    names no service is `ampfleet-<role>`."""
    detected = Resource.create({"ampfleet.role": role})
    if str(detected.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        detected = detected.merge(Resource({SERVICE_NAME: f"ampfleet-{role}"}))
    return detected


def configure_tracing(role: str) -> bool:
    """Install this process's tracer provider as OTEL_* asks; whether tracing is on. Called
    once, at the start of a server process, before any engine is made."""
    global _configured  # noqa: PLW0603 - one provider per process, set once at start
    names = exporter_names(os.environ)
    for name in names:
        if name != "otlp":
            log.warning("OTEL_TRACES_EXPORTER names %r, which is not shipped; ignored", name)
    problem = otlp_problem(os.environ) if "otlp" in names else None
    if problem:
        log.warning("traces are off: %s", problem)
    if "otlp" not in names or problem:
        return False
    resource = resource_of(role)
    processor = BatchSpanProcessor(OTLPSpanExporter())  # endpoint, headers, timeout: OTEL_*
    provider = TracerProvider(resource=resource)  # its sampler: OTEL_TRACES_SAMPLER
    provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    trace_statements(resource, processor)
    _configured = True
    log.info("traces are exported over OTLP as service %s", resource.attributes[SERVICE_NAME])
    return True


def trace_statements(resource: Resource, processor: SpanProcessor) -> None:
    """Every engine made from now on traces its statements, inside an operation (a request,
    a placement, a launch) and never on their own: the scheduler's passes and the heartbeats
    would otherwise be a trace a second each. Their own provider samples only what has a
    sampled parent, and hands them to `processor` with the process's other spans."""
    statements = TracerProvider(
        resource=resource, sampler=ParentBased(ALWAYS_OFF), shutdown_on_exit=False
    )
    statements.add_span_processor(processor)
    # The instrumentation declares SQLAlchemy <2.1; it runs on 2.1 as it is (a test shows
    # the statements' spans on the installed version).
    SQLAlchemyInstrumentor().instrument(tracer_provider=statements, skip_dep_check=True)


def tracing_on() -> bool:
    return _configured


def current_context() -> dict[str, str] | None:
    """The W3C trace context of the current span, to store or hand on; None without one."""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier)
    return carrier or None


@contextmanager
def continued(
    name: str,
    carrier: Mapping[str, str] | None,
    attributes: Mapping[str, AttributeValue],
    *,
    start: datetime | None = None,
) -> Iterator[Span]:
    """A span of the trace that `carrier` (a stored context) names, current inside the
    block; a new trace when `carrier` names none. `start`: when the work began, if before."""
    span = tracer.start_span(
        name,
        context=parent_of(carrier),
        attributes=dict(attributes),
        start_time=nanoseconds(start) if start else None,
    )
    with trace.use_span(span, end_on_exit=True, record_exception=True):
        yield span


def parent_of(carrier: Mapping[str, str] | None) -> context.Context:
    """The context a span continuing `carrier` starts in (an empty one: a new trace)."""
    return _W3C.extract(dict(carrier or {}), context=context.Context())


def nanoseconds(at: datetime) -> int:
    """A span's time: nanoseconds since the epoch."""
    return int(at.timestamp() * 1e9)
