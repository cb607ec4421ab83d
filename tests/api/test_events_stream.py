"""The live event stream (SSE) and its resumption with Last-Event-ID."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import insert

from ampfleet.core.db import session_scope
from ampfleet.core.models import Metric, utcnow
from tests.support.event_streams import SSE, read_frames
from tests.support.factories import job_spec


def test_stream_sends_states_metrics_progress_then_ends(client: TestClient) -> None:
    job = client.post("/v1/jobs", json=job_spec()).json()
    with session_scope() as session:
        session.execute(
            insert(Metric),
            [
                {
                    "job_id": job["id"],
                    "attempt": 1,
                    "step": s,
                    "name": "loss",
                    "value": 1.0 / s,
                    "time": utcnow(),
                }
                for s in range(1, 4)
            ],
        )
    client.post(f"/v1/jobs/{job['id']}/cancel")
    frames = read_frames(client, job["id"], SSE)
    kinds = [f["event"] for f in frames]
    assert kinds[:2] == ["state", "state"]
    assert [f["data"]["to_state"] for f in frames[:2]] == ["QUEUED", "CANCELLED"]
    assert "metrics" in kinds
    metrics = next(f for f in frames if f["event"] == "metrics")["data"]["points"]
    assert [p["step"] for p in metrics] == [1, 2, 3]
    assert kinds[-1] == "end"
    assert frames[-1]["data"] == {"state": "CANCELLED"}
    assert all("id" in f for f in frames)


def test_stream_resumes_after_last_event_id(client: TestClient) -> None:
    job = client.post("/v1/jobs", json=job_spec()).json()
    client.post(f"/v1/jobs/{job['id']}/cancel")
    first = read_frames(client, job["id"], SSE)
    resumed = read_frames(client, job["id"], {**SSE, "Last-Event-ID": first[0]["id"]})
    states = [f["data"]["to_state"] for f in resumed if f["event"] == "state"]
    assert states == ["CANCELLED"]  # the QUEUED transition is not sent twice
    assert resumed[-1]["event"] == "end"


def test_bad_last_event_id_is_422(client: TestClient) -> None:
    job = client.post("/v1/jobs", json=job_spec()).json()
    response = client.get(
        f"/v1/jobs/{job['id']}/events", headers={**SSE, "Last-Event-ID": "yesterday"}
    )
    assert response.status_code == 422
    assert response.json()["error"]["details"][0]["field"] == "Last-Event-ID"


OUT_OF_RANGE = "99999999999999999999"  # past BIGINT: once a 500, or a 200 stream cut off
MALFORMED = (OUT_OF_RANGE, "²", "-1", " 1", "1e3", "0x10")


@pytest.mark.parametrize("value", MALFORMED)
@pytest.mark.parametrize("accept", [SSE, {}])
def test_malformed_last_event_id_is_422_on_logs(client: TestClient, value, accept) -> None:
    job = client.post("/v1/jobs", json=job_spec()).json()
    resume = {"Last-Event-ID": value.encode("latin-1")}  # the server reads it as latin-1
    response = client.get(f"/v1/jobs/{job['id']}/logs", headers={**accept, **resume})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["details"][0]["field"] == "Last-Event-ID"


@pytest.mark.parametrize("value", [f"{v}:0" for v in MALFORMED] + [f"0:{OUT_OF_RANGE}", "1"])
def test_malformed_last_event_id_is_422_on_events(client: TestClient, value) -> None:
    job = client.post("/v1/jobs", json=job_spec()).json()
    resume = {"Last-Event-ID": value.encode("latin-1")}
    response = client.get(f"/v1/jobs/{job['id']}/events", headers={**SSE, **resume})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["details"][0]["field"] == "Last-Event-ID"


def test_the_largest_ids_resume_past_everything(client: TestClient) -> None:
    job = client.post("/v1/jobs", json=job_spec()).json()
    client.post(f"/v1/jobs/{job['id']}/cancel")
    largest = str(2**63 - 1)
    frames = read_frames(client, job["id"], {**SSE, "Last-Event-ID": f"{largest}:{largest}"})
    assert [f["event"] for f in frames] == ["progress", "end"]
    logs = client.get(f"/v1/jobs/{job['id']}/logs", headers={**SSE, "Last-Event-ID": largest})
    assert logs.status_code == 200
    assert "event: end" in logs.text
