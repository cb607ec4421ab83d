"""The live stream's progress frame carries what GET /v1/jobs/{id} says of progress and of
the queue, so a follower needs nothing else."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import insert, update

from ampfleet.api.jobs.stream import Cursor, JobStream
from ampfleet.core.db import session_scope
from ampfleet.core.models import Job, Metric, utcnow
from tests.support.factories import job_spec


def progress_frames(stream: JobStream) -> list[dict]:
    frames, _ = stream.step()
    parsed = []
    for raw in frames:
        fields = dict(line.split(": ", 1) for line in raw.decode().strip().split("\n"))
        if fields["event"] == "progress":
            parsed.append(json.loads(fields["data"]))
    return parsed


def change(job_id: str, **values: object) -> None:
    with session_scope() as session:
        session.execute(update(Job).where(Job.id == job_id).values(**values))


def test_a_queued_job_says_where_it_waits_and_why(client: TestClient) -> None:
    job_id = client.post("/v1/jobs", json=job_spec()).json()["id"]
    change(job_id, queue_position=3, pending_reason="waiting for capacity")
    stream = JobStream(job_id, Cursor())

    [first] = progress_frames(stream)
    assert first["state"] == "QUEUED"
    assert first["eta_seconds"] is None
    assert first["queue"] == client.get(f"/v1/jobs/{job_id}").json()["queue"]
    assert first["queue"]["position"] == 3
    assert first["queue"]["pending_reason"] == "waiting for capacity"

    assert progress_frames(stream) == []  # nothing changed: no frame
    change(job_id, queue_position=1, pending_reason="reserved")
    [moved] = progress_frames(stream)
    assert (moved["queue"]["position"], moved["queue"]["pending_reason"]) == (1, "reserved")


def test_a_running_job_carries_the_servers_eta(client: TestClient) -> None:
    job_id = client.post("/v1/jobs", json=job_spec(stop={"max_steps": 100})).json()["id"]
    change(job_id, state="RUNNING", attempt=1, started_at=utcnow() - timedelta(seconds=100))
    change(job_id, step=25)
    now = utcnow()
    add_series(job_id, [(step, now - timedelta(seconds=(25 - step) * 4)) for step in (5, 15, 25)])
    stream = JobStream(job_id, Cursor())

    [running] = progress_frames(stream)
    assert running["queue"] is None
    # 10 steps every 40 s: 75 more take 300 s (less the moment between the insert and the read).
    assert running["eta_seconds"] == pytest.approx(300, abs=5)
    assert (running["steps_per_s"], running["eta_confidence"]) == (pytest.approx(0.25), "medium")
    served = client.get(f"/v1/jobs/{job_id}").json()["progress"]
    assert running["eta_seconds"] == pytest.approx(served["eta_seconds"], abs=5)
    assert running["eta_confidence"] == served["eta_confidence"]

    assert progress_frames(stream) == []  # the ETA moving with the clock is not news
    change(job_id, step=50)
    add_series(job_id, [(50, utcnow())])
    [later] = progress_frames(stream)
    assert later["step"] == 50
    assert later["eta_seconds"] < running["eta_seconds"]


def add_series(job_id: str, points: list[tuple[int, datetime]]) -> None:
    """Loss points of attempt 1, each stored at its time."""
    with session_scope() as session:
        session.execute(
            insert(Metric),
            [
                {
                    "job_id": job_id,
                    "attempt": 1,
                    "step": step,
                    "name": "loss",
                    "value": 1.0,
                    "time": at,
                }
                for step, at in points
            ],
        )
