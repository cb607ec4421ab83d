"""Tracing as the OTEL_* variables configure it (core/tracing.py), the statements' spans on
the installed SQLAlchemy, and the first step as the agent reads it from rank 0's records."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy import text

from ampfleet.core.db import make_engine
from ampfleet.core.settings import get_settings
from ampfleet.core.tracing import exporter_names, otlp_problem, resource_of, trace_statements
from ampfleet.workers.launch_trace import LaunchTrace
from tests.support.env import environment

ENDPOINT = "http://collector:4318"


@pytest.mark.parametrize(
    ("environ", "exporters"),
    [
        ({}, []),  # nothing configured: off, not the spec's default `otlp` at localhost
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}, ["otlp"]),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": ENDPOINT}, ["otlp"]),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, ["otlp"]),
        ({"OTEL_TRACES_EXPORTER": " OTLP, console "}, ["otlp", "console"]),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}, []),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}, []),
        ({"OTEL_SDK_DISABLED": "false", "OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}, ["otlp"]),
    ],
)
def test_what_the_variables_turn_on(environ: dict[str, str], exporters: list[str]) -> None:
    assert exporter_names(environ) == exporters


def test_only_otlp_over_http_protobuf_is_shipped() -> None:
    assert otlp_problem({}) is None
    assert otlp_problem({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}) is None
    problem = otlp_problem({"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"})
    assert problem is not None
    assert "'grpc' is not supported" in problem


def test_a_process_is_its_role_unless_the_variables_name_a_service() -> None:
    with environment({"OTEL_SERVICE_NAME": "", "OTEL_RESOURCE_ATTRIBUTES": ""}):
        assert resource_of("scheduler").attributes["service.name"] == "ampfleet-scheduler"
    with environment({"OTEL_RESOURCE_ATTRIBUTES": "service.name=fleet-a,deployment=eu"}):
        attributes = resource_of("api").attributes
        assert (attributes["service.name"], attributes["deployment"]) == ("fleet-a", "eu")
        assert attributes["ampfleet.role"] == "api"
    with environment({"OTEL_SERVICE_NAME": "fleet-b"}):
        assert resource_of("worker").attributes["service.name"] == "fleet-b"


@pytest.fixture
def exported() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    processor = SimpleSpanProcessor(exporter)
    provider = TracerProvider(resource=resource_of("test"))
    provider.add_span_processor(processor)
    trace_statements(provider.resource, processor)
    try:
        yield provider, exporter
    finally:
        SQLAlchemyInstrumentor().uninstrument()


def test_statements_are_spans_inside_an_operation_only(
    backend: str, exported: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = exported
    engine = make_engine(get_settings().effective_database_url)  # made after, as in a server
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1 AS alone"))
            with provider.get_tracer("test").start_as_current_span("operation"):
                connection.execute(text("SELECT 2 AS inside"))
    finally:
        engine.dispose()
    spans = exporter.get_finished_spans()
    (operation,) = [s for s in spans if s.name == "operation"]
    statements = [s for s in spans if "db.statement" in (s.attributes or {})]
    assert [(s.attributes or {})["db.statement"] for s in statements] == ["SELECT 2 AS inside"]
    assert statements[0].parent is not None
    assert statements[0].parent.span_id == operation.context.span_id


def _launched(provider: TracerProvider) -> LaunchTrace:
    spans = provider.get_tracer("test")
    launch = LaunchTrace(spans.start_span("ampfleet.launch"), reports_steps=True, spans=spans)
    launch.spawned()
    return launch


def _first_step(exporter: InMemorySpanExporter) -> ReadableSpan:
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "ampfleet.first_step"]
    return span


def test_the_first_step_is_past_the_resume_point_within_the_spawn_and_now(
    exported: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = exported
    launch = _launched(provider)
    launch.observe(
        [
            # A rank's times before the spawn, or in the future, are not believed.
            {"kind": "started", "resumed_from_step": 40, "time": 1.0},
            {"kind": "metrics", "step": 40, "values": {}},  # the resume point: no new step
        ]
    )
    assert [s.name for s in exporter.get_finished_spans()] == ["ampfleet.launch"]
    launch.observe([{"kind": "progress", "step": 41, "total_steps": 99, "time": 1e12}])
    ended_by = time.time_ns()
    (launch_span,) = [s for s in exporter.get_finished_spans() if s.name == "ampfleet.launch"]
    span = _first_step(exporter)
    assert span.parent is not None
    assert span.parent.span_id == launch_span.context.span_id
    assert (span.attributes or {})["ampfleet.step"] == 41
    (started,) = span.events
    assert started.name == "ranks started"
    assert launch_span.end_time == span.start_time == started.timestamp
    assert span.start_time is not None
    assert span.end_time is not None
    assert span.start_time <= span.end_time <= ended_by


def test_an_attempt_that_reports_no_step_says_so(
    exported: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = exported
    launch = _launched(provider)
    launch.ended()
    assert (_first_step(exporter).attributes or {})["ampfleet.step_reported"] is False
