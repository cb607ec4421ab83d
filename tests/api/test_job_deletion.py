"""DELETE /v1/jobs/{id}: a job that ended goes with every row naming it, and the store
objects no other row names; on PostgreSQL and SQLite, with the local and the S3 store."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import func, select, update

from ampfleet.core.artifacts import ArtifactNotFoundError, get_store, object_key
from ampfleet.core.db import session_scope
from ampfleet.core.messaging import enqueue
from ampfleet.core.models import (
    Allocation,
    Artifact,
    Job,
    JobEvent,
    LogLine,
    Metric,
    Node,
    OutboxMessage,
)
from ampfleet.core.states import JobState
from tests.conftest import KeyFactory
from tests.support.clients import keyed
from tests.support.env import environment
from tests.support.factories import add_artifact, job_spec

OWN = os.urandom(300_000)
SHARED = os.urandom(200_000)


def stored(data: bytes) -> bool:
    try:
        chunks = get_store().open_range(object_key(hashlib.sha256(data).hexdigest()), 0, 1)
        b"".join(chunks)
    except ArtifactNotFoundError:
        return False
    return True


def end(job_id: str) -> None:
    with session_scope() as session:
        session.execute(update(Job).where(Job.id == job_id).values(state=JobState.SUCCEEDED))


def rows_naming(job_id: str) -> dict[str, int]:
    with session_scope() as session:
        counts = {
            table.__tablename__: session.scalar(
                select(func.count()).select_from(table).where(table.job_id == job_id)
            )
            or 0
            for table in (JobEvent, Metric, LogLine, Allocation, Artifact)
        }
        counts["outbox"] = (
            session.scalar(
                select(func.count())
                .select_from(OutboxMessage)
                .where(OutboxMessage.kwargs["job_id"].as_string() == job_id)
            )
            or 0
        )
        counts["jobs"] = session.scalar(select(func.count()).where(Job.id == job_id)) or 0
    return counts


@pytest.fixture
def writer(
    app: FastAPI, make_key: KeyFactory, store_environment: dict[str, str]
) -> Iterator[TestClient]:
    with environment(store_environment):
        yield keyed(app, make_key("alpha", "write"))


def test_a_deleted_job_leaves_no_row_and_no_object_only_it_named(
    writer: TestClient, tmp_path: Path
) -> None:
    spec = job_spec()
    job = writer.post("/v1/jobs", json=spec, headers={"Idempotency-Key": "k1"}).json()
    other = writer.post("/v1/jobs", json=job_spec()).json()
    add_artifact(tmp_path, job, "model.safetensors", "model", OWN, 20)
    add_artifact(tmp_path, job, "checkpoint-000000020", "checkpoint", SHARED, 20)
    add_artifact(tmp_path, other, "checkpoint-000000020", "checkpoint", SHARED, 20)
    with session_scope() as session:
        session.add(Metric(job_id=job["id"], attempt=0, step=1, name="loss", value=1.0))
        session.add(LogLine(job_id=job["id"], attempt=0, rank=0, stream="stdout", line="hi"))
        enqueue(session, queue="node.x", task="ampfleet.stop_job", job_id=job["id"])
        session.add(Node(id="n1", queue="node.n1", address="127.0.0.1", accelerator="cpu", slots=2))
        session.flush()
        session.add(Allocation(job_id=job["id"], attempt=0, node_id="n1", node_rank=0, slots=2))
    end(job["id"])
    before = rows_naming(job["id"])
    assert all(
        before[table]
        for table in ("job_events", "metrics", "log_lines", "allocations", "artifacts")
    )

    deleted = writer.delete(f"/v1/jobs/{job['id']}")

    assert deleted.status_code == 204, deleted.text
    assert rows_naming(job["id"]) == dict.fromkeys(before, 0)
    assert not stored(OWN)
    assert stored(SHARED)  # the other job's checkpoint names the same bytes
    assert writer.get(f"/v1/jobs/{job['id']}").status_code == 404
    listed = writer.get(f"/v1/jobs/{other['id']}/checkpoints").json()["items"]
    assert [c["step"] for c in listed] == [20]
    assert writer.delete(f"/v1/jobs/{job['id']}").status_code == 404
    again = writer.post("/v1/jobs", json=spec, headers={"Idempotency-Key": "k1"})
    assert again.status_code == 202  # the key went with the job: a new job, not a replay
    assert again.json()["id"] != job["id"]


def test_a_job_that_has_not_ended_is_409_naming_its_state(writer: TestClient) -> None:
    job = writer.post("/v1/jobs", json=job_spec()).json()
    with session_scope() as session:
        session.execute(update(Job).where(Job.id == job["id"]).values(state=JobState.RUNNING))
    refused = writer.delete(f"/v1/jobs/{job['id']}")
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "conflict"
    assert "RUNNING" in refused.json()["error"]["message"]
    assert rows_naming(job["id"])["jobs"] == 1


def test_a_read_key_is_403_and_another_project_404(
    writer: TestClient, app: FastAPI, make_key: KeyFactory
) -> None:
    job = writer.post("/v1/jobs", json=job_spec()).json()
    end(job["id"])
    reader = keyed(app, make_key("alpha", "read"))
    assert reader.delete(f"/v1/jobs/{job['id']}").status_code == 403
    stranger = keyed(app, make_key("beta", "write"))
    assert stranger.delete(f"/v1/jobs/{job['id']}").status_code == 404
    assert rows_naming(job["id"])["jobs"] == 1


def test_the_route_is_documented(app: FastAPI) -> None:
    operation = app.openapi()["paths"]["/v1/jobs/{job_id}"]["delete"]
    assert operation["operationId"] == "deleteJob"
    assert {"204", "403", "404", "409"} <= set(operation["responses"])
