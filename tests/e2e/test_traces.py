"""Traces and log lines of real api, scheduler and worker processes: one trace per job from
the submit to its ranks' first step, exported over OTLP/HTTP to a receiver of the test's;
every log line JSON, carrying the trace id inside a span."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.factories import job_spec
from tests.support.fleet import Fleet, running_fleet
from tests.support.logs import json_lines
from tests.support.otlp import ReceivedSpan, otlp_receiver
from tests.support.ports import free_port

pytestmark = pytest.mark.e2e

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
SERVER_ROLES = ("api", "scheduler", "worker-node-a")


def tracing_env(endpoint: str) -> dict[str, str]:
    # Spans leave every 100 ms rather than every 5 s: the test waits for them.
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"}


@dataclass
class TracedRun:
    fleet: Fleet
    job_id: str
    spans: list[ReceivedSpan]
    client_job_id: str

    def one(self, name: str, **attributes: Any) -> ReceivedSpan:
        (span,) = [
            s
            for s in self.spans
            if s.name == name and all(s.attributes.get(k) == v for k, v in attributes.items())
        ]
        return span


def _reached_first_step(job_id: str) -> Any:
    def reached(spans: list[ReceivedSpan]) -> bool:
        return any(
            s.name == "ampfleet.first_step" and s.trace_id in _traces_of(spans, job_id)
            for s in spans
        )

    return reached


def _traces_of(spans: list[ReceivedSpan], job_id: str) -> set[str]:
    return {
        s.trace_id
        for s in spans
        if s.name == "ampfleet.submit" and s.attributes.get("ampfleet.job_id") == job_id
    }


@pytest.fixture(scope="module")
def traced_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TracedRun]:
    with (
        otlp_receiver() as receiver,
        running_fleet(
            tmp_path_factory.mktemp("traced"), extra_env=tracing_env(receiver.url)
        ) as fleet,
    ):
        job = fleet.submit(job_spec(stop={"max_steps": 20}, log_every_steps=1))
        # A client's own trace: the job joins it.
        traceparent = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
        joined = fleet.submit(job_spec(stop={"max_steps": 5}), headers={"traceparent": traceparent})
        for job_id in (job["id"], joined["id"]):
            fleet.wait_for_state(job_id, {"SUCCEEDED"})
        spans = receiver.wait_for(
            _reached_first_step(job["id"]), timeout=60, what="the first step's span"
        )
        fleet.stop()  # so that their logs hold what the processes say as they stop
        yield TracedRun(fleet, job["id"], spans, joined["id"])


def test_one_trace_from_the_submit_to_the_first_step(traced_run: TracedRun) -> None:
    run = traced_run
    submit = run.one("ampfleet.submit", **{"ampfleet.job_id": run.job_id})
    place = run.one("ampfleet.place", **{"ampfleet.job_id": run.job_id})
    launch = run.one("ampfleet.launch", **{"ampfleet.job_id": run.job_id})
    (first_step,) = [
        s for s in run.spans if s.name == "ampfleet.first_step" and s.trace_id == submit.trace_id
    ]
    (request,) = [s for s in run.spans if s.span_id == submit.parent_span_id]

    assert request.name == "POST /v1/jobs"
    assert request.parent_span_id == ""  # the API began this trace
    chain = [request, submit, place, launch, first_step]
    assert {s.trace_id for s in chain} == {submit.trace_id}
    for parent, child in itertools.pairwise(chain):
        assert child.parent_span_id == parent.span_id, (parent.name, child.name)
    assert [s.role for s in chain] == ["api", "api", "scheduler", "worker", "worker"]
    assert [s.resource["service.name"] for s in chain] == [
        "ampfleet-api",
        "ampfleet-api",
        "ampfleet-scheduler",
        "ampfleet-worker",
        "ampfleet-worker",
    ]
    assert place.attributes["ampfleet.attempt"] == launch.attributes["ampfleet.attempt"] == 1
    assert place.attributes["ampfleet.nodes"] == "node-a x2"
    assert launch.attributes["ampfleet.launched"] is True
    # The first step: after the spawn, reported by rank 0's records, the ranks up first.
    assert launch.end_ns <= first_step.start_ns <= first_step.end_ns
    assert first_step.attributes["ampfleet.step"] >= 1
    assert first_step.events == ("ranks started",)
    assert all(s.status_code != 2 for s in chain)


def test_database_statements_are_spans_inside_operations_only(traced_run: TracedRun) -> None:
    run = traced_run
    statements = [s for s in run.spans if "db.system" in s.attributes]
    submit = run.one("ampfleet.submit", **{"ampfleet.job_id": run.job_id})
    inserted = [s for s in statements if s.parent_span_id == submit.span_id]
    assert any("INSERT INTO jobs" in s.attributes.get("db.statement", "") for s in inserted)
    # A scheduler's statements serve a whole pass, many jobs at once: of no one job's trace.
    assert {s.role for s in statements} == {"api", "worker"}
    # The scheduler's passes and the heartbeats ran statements all along: none on its own.
    assert [s for s in statements if s.parent_span_id == ""] == []


def test_a_clients_trace_is_continued(traced_run: TracedRun) -> None:
    run = traced_run
    submit = run.one("ampfleet.submit", **{"ampfleet.job_id": run.client_job_id})
    (request,) = [s for s in run.spans if s.span_id == submit.parent_span_id]
    assert (request.trace_id, request.parent_span_id) == (CLIENT_TRACE, CLIENT_SPAN)
    place = run.one("ampfleet.place", **{"ampfleet.job_id": run.client_job_id})
    assert place.trace_id == CLIENT_TRACE


def log_lines(fleet: Fleet, name: str) -> list[dict[str, Any]]:
    return json_lines((fleet.root / f"{name}.log").read_text())


def test_every_log_line_is_json_with_the_trace_id_inside_a_span(traced_run: TracedRun) -> None:
    run = traced_run
    submit = run.one("ampfleet.submit", **{"ampfleet.job_id": run.job_id})
    place = run.one("ampfleet.place", **{"ampfleet.job_id": run.job_id})
    launch = run.one("ampfleet.launch", **{"ampfleet.job_id": run.job_id})
    logs = {name: log_lines(run.fleet, name) for name in SERVER_ROLES}
    for name, entries in logs.items():
        for entry in entries:
            assert "color_message" not in entry, (name, entry)
            assert "\x1b" not in json.dumps(entry), (name, entry)

    (submitted,) = [
        e
        for e in logs["api"]
        if e["logger"] == "ampfleet.access" and e.get("trace_id") == submit.trace_id
    ]
    assert (submitted["method"], submitted["path"], submitted["status"]) == (
        "POST",
        "/v1/jobs",
        202,
    )
    (placed,) = [e for e in logs["scheduler"] if e.get("span_id") == place.span_id]
    assert placed["trace_id"] == submit.trace_id
    assert placed["message"] == f"placed {run.job_id} attempt 1 on node-a x2"
    launched = [e for e in logs["worker-node-a"] if e.get("span_id") == launch.span_id]
    assert any(e["message"].startswith(f"launched {run.job_id} attempt 1") for e in launched)
    assert {e["trace_id"] for e in launched} == {submit.trace_id}
    # uvicorn's lines and what Celery tells the terminal as it stops are among them, as JSON.
    assert any(e["message"].startswith("Uvicorn running on") for e in logs["api"])
    assert any(e["message"] == "worker: Warm shutdown (MainProcess)" for e in logs["worker-node-a"])


def test_an_unreachable_collector_fails_no_request(tmp_path: Path) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with running_fleet(
        tmp_path, nodes=(), start_schedulers=0, extra_env=tracing_env(nowhere)
    ) as fleet:
        job = fleet.submit(job_spec())
        assert fleet.job(job["id"])["state"] == "QUEUED"

        def export_failed() -> bool:
            return any(
                e["logger"].startswith("opentelemetry.exporter") for e in log_lines(fleet, "api")
            )

        fleet.wait_until(export_failed, timeout=60, what="the exporter to say it failed")
