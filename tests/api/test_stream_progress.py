"""The live stream's progress frame carries what GET /v1/jobs/{id} says of progress and of
the queue, so a follower needs nothing else."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from ampfleet.api.jobs.stream import Cursor, JobStream
from ampfleet.core.db import session_scope
from ampfleet.core.models import Job, utcnow
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
    change(job_id, state="RUNNING", started_at=utcnow() - timedelta(seconds=100), step=25)
    stream = JobStream(job_id, Cursor())

    [running] = progress_frames(stream)
    assert running["queue"] is None
    # 25 steps in 100 s: 75 more take 300 s (less the moment between the update and the read).
    assert running["eta_seconds"] == pytest.approx(300, abs=5)
    served = client.get(f"/v1/jobs/{job_id}").json()["progress"]["eta_seconds"]
    assert running["eta_seconds"] == pytest.approx(served, abs=5)

    assert progress_frames(stream) == []  # the ETA moving with the clock is not news
    change(job_id, step=50)
    [later] = progress_frames(stream)
    assert later["step"] == 50
    assert later["eta_seconds"] < running["eta_seconds"]
