"""Health, readiness, Prometheus metrics, request ids and structured logs."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from ampfleet.core.logs import JsonFormatter, request_id
from ampfleet.core.migrate import upgrade
from tests.support.env import environment
from tests.support.factories import job_spec
from tests.support.private_services import PrivatePostgres, private_postgres

UNREACHABLE_BROKER = {"AMPFLEET_BROKER_URL": "redis://127.0.0.1:1/0"}


def test_health_and_readiness(anonymous: TestClient) -> None:
    assert anonymous.get("/healthz").json() == {"status": "ok"}
    assert anonymous.get("/readyz").json() == {"status": "ready", "database": "ok", "broker": "ok"}
    for path in ("/healthz", "/readyz"):
        answer = anonymous.head(path)
        assert answer.status_code == 200, path
        assert answer.content == b"", path


def test_readiness_names_an_unreachable_broker(backend: str) -> None:
    with environment(UNREACHABLE_BROKER):
        from ampfleet.api.app import create_app

        client = TestClient(create_app())
        response = client.get("/readyz")
        assert client.head("/readyz").status_code == 503
        assert client.get("/healthz").status_code == 200  # alive all the same
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "2"  # every 503 says when to come back
    body = response.json()["error"]
    assert body["code"] == "service_unavailable"
    assert [detail["field"] for detail in body["details"]] == ["broker"]
    assert body["message"] == "not ready: the broker is unavailable"


@pytest.fixture
def own_postgres(tmp_path: Path) -> Iterator[PrivatePostgres]:
    """The API on a PostgreSQL of this test's own, which it stops (the broker: files)."""
    with private_postgres() as server:
        upgrade(server.url)
        values = {
            "AMPFLEET_DATABASE_URL": server.url,
            "AMPFLEET_BROKER_URL": "",
            "AMPFLEET_DATA_DIR": str(tmp_path / "var"),
            "AMPFLEET_ENVIRONMENT": "test",
            "AMPFLEET_SECRET_KEY": "test-secret-not-for-production",
        }
        with environment(values):
            yield server


def test_in_a_database_outage_the_process_is_alive_and_not_ready(
    own_postgres: PrivatePostgres,
) -> None:
    from ampfleet.api.app import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as client:
        assert client.get("/readyz").status_code == 200
        own_postgres.stop()
        assert client.get("/healthz").json() == {"status": "ok"}
        assert client.head("/healthz").status_code == 200
        ready = client.get("/readyz")
        assert ready.status_code == 503
        assert ready.headers["Retry-After"]
        error = ready.json()["error"]
        assert error["code"] == "service_unavailable"
        assert error["message"] == "not ready: the database is unavailable"
        assert [detail["field"] for detail in error["details"]] == ["database"]
        assert "OperationalError" in error["details"][0]["message"]
        assert client.head("/readyz").status_code == 503
        own_postgres.start()
        assert client.get("/readyz").status_code == 200
    with environment(UNREACHABLE_BROKER), TestClient(create_app()) as client:
        own_postgres.stop()  # both down: each named
        error = client.get("/readyz").json()["error"]
        assert client.get("/healthz").status_code == 200
        own_postgres.start()
    assert [detail["field"] for detail in error["details"]] == ["database", "broker"]
    assert error["message"] == "not ready: the database and the broker are unavailable"


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
