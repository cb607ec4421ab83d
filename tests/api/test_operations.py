"""Health, readiness, Prometheus metrics, request ids and structured logs."""

from __future__ import annotations

import json
import logging

from fastapi.testclient import TestClient

from ampfleet.core.logs import JsonFormatter, request_id
from tests.support.env import environment
from tests.support.factories import job_spec


def test_health_and_readiness(anonymous: TestClient) -> None:
    assert anonymous.get("/healthz").json() == {"status": "ok", "database": "ok"}
    assert anonymous.get("/readyz").json() == {"status": "ready", "database": "ok", "broker": "ok"}


def test_readiness_names_an_unreachable_broker(backend: str) -> None:
    with environment({"AMPFLEET_BROKER_URL": "redis://127.0.0.1:1/0"}):
        from ampfleet.api.app import create_app

        response = TestClient(create_app()).get("/readyz")
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "2"  # every 503 says when to come back
    body = response.json()["error"]
    assert body["code"] == "service_unavailable"
    assert body["details"][0]["field"] == "broker"


def test_prometheus_metrics(client: TestClient, anonymous: TestClient) -> None:
    client.post("/v1/jobs", json=job_spec())
    text = anonymous.get("/metrics").text
    assert 'ampfleet_jobs{state="QUEUED"} 1' in text
    assert "ampfleet_queue_depth 1" in text
    assert 'ampfleet_scheduling_latency_seconds_bucket{le="+Inf"}' in text
    assert "ampfleet_metric_points_ingested_total" in text
    assert 'ampfleet_http_requests_total{method="POST",route="/v1/jobs",status="202"}' in text


def test_request_ids_are_echoed_or_made(anonymous: TestClient) -> None:
    given = anonymous.get("/healthz", headers={"X-Request-ID": "build-42.step_3"})
    assert given.headers["x-request-id"] == "build-42.step_3"
    made = anonymous.get("/healthz", headers={"X-Request-ID": "bad id with spaces"})
    assert made.headers["x-request-id"] != "bad id with spaces"
    assert len(made.headers["x-request-id"]) == 32


def test_json_log_lines_carry_the_request_id() -> None:
    formatter = JsonFormatter("api")
    record = logging.LogRecord(
        "ampfleet.access", logging.INFO, __file__, 1, "GET %s", ("/x",), None
    )
    record.status = 200
    token = request_id.set("abc123")
    try:
        line = json.loads(formatter.format(record))
    finally:
        request_id.reset(token)
    assert line["request_id"] == "abc123"
    assert line["message"] == "GET /x"
    assert line["status"] == 200
    assert line["role"] == "api"
