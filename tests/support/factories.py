"""Builders of test inputs and database rows: job specs, jobs submitted over the API, and jobs
inserted straight into the database (bypassing the API, for lifecycle tests); and what a job's
nodes would have recorded of it, written straight to the database and the artifact store:
artifacts, checkpoints as the platform's loop writes them, metrics."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import func, select

from ampfleet.api.jobs.service import resolve
from ampfleet.core.artifacts import StoredObject, get_store
from ampfleet.core.db import session_scope
from ampfleet.core.ids import new_id
from ampfleet.core.models import Artifact, Job, JobEvent, Metric, Node, OutboxMessage, utcnow
from ampfleet.core.spec import JobSpec
from ampfleet.core.states import JobState


def job_spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "recipe": "digits",
        "resources": {"nodes": 1, "procs_per_node": 2},
        "precision": "bf16",
        "allreduce_dtype": "bf16",
        "stop": {"max_steps": 20},
    }
    spec.update(overrides)
    return spec


def code_spec(bundle: str, entrypoint: str, **overrides: Any) -> dict[str, Any]:
    """A job that runs `entrypoint` of an uploaded bundle instead of a built-in recipe."""
    spec = job_spec(code={"bundle": bundle, "entrypoint": entrypoint}, **overrides)
    del spec["recipe"]
    return spec


def row_counts() -> dict[str, int]:
    with session_scope() as session:
        return {
            model.__tablename__: session.scalar(select(func.count()).select_from(model)) or 0
            for model in (Job, JobEvent, Metric, OutboxMessage)
        }


def submit(client: TestClient, **overrides: Any) -> dict[str, Any]:
    """Submits `job_spec(**overrides)` over the API; the accepted job as answered."""
    response = client.post("/v1/jobs", json=job_spec(**overrides))
    assert response.status_code == 202, response.text
    job: dict[str, Any] = response.json()
    return job


def insert_job(
    *,
    state: JobState = JobState.QUEUED,
    attempt: int = 0,
    max_restarts: int = 2,
    procs_per_node: int = 2,
) -> str:
    spec = JobSpec(
        recipe="digits",
        resources={"procs_per_node": procs_per_node},  # type: ignore[arg-type]
        retry={"max_restarts": max_restarts},  # type: ignore[arg-type]
    )
    job_id = new_id("job")
    with session_scope() as session:
        session.add(
            Job(
                id=job_id,
                project="default",
                name=None,
                recipe="digits",
                spec=spec.model_dump(mode="json"),
                resolved=resolve(spec),
                state=state.value,
                priority=1,
                attempt=attempt,
                gang_size=procs_per_node,
                step=0,
                total_steps=100,
                latest_metrics={},
            )
        )
        session.flush()
        session.add(
            JobEvent(
                job_id=job_id,
                attempt=attempt,
                kind="transition",
                from_state=None,
                to_state=state.value,
                reason="test",
                message="",
            )
        )
    return job_id


def add_node(node_id: str, slots: int = 8, **fields: Any) -> None:
    """A ready node with a fresh heartbeat: an H200 GPU node unless `fields` say otherwise."""
    row: dict[str, Any] = {
        "accelerator": "cuda",
        "gpu_model": "NVIDIA H200",
        "gpu_memory_mb": 143_000,
        "labels": {},
        "state": "ready",
        "registered_at": utcnow(),
        "last_heartbeat_at": utcnow(),
        **fields,
    }
    with session_scope() as session:
        session.add(
            Node(id=node_id, queue=f"node.{node_id}", address="127.0.0.1", slots=slots, **row)
        )


def add_artifact(
    tmp_path: Path, job: dict[str, Any], name: str, kind: str, data: bytes, step: int | None
) -> None:
    """`data` put in the artifact store and listed as the job's artifact."""
    source = tmp_path / f"src-{hashlib.sha1(name.encode()).hexdigest()}"
    source.write_bytes(data)
    details = {"precision": "bf16"} if kind == "checkpoint" else {}
    list_stored(job, get_store().put_file(source), name=name, kind=kind, step=step, details=details)


def list_stored(
    job: dict[str, Any],
    stored: StoredObject,
    *,
    name: str,
    kind: str,
    step: int | None,
    attempt: int = 0,
    details: dict[str, Any] | None = None,
) -> None:
    """An object already in the artifact store listed as the job's artifact, as a node lists
    what it uploaded."""
    with session_scope() as session:
        session.add(
            Artifact(
                id=new_id("art"),
                job_id=job["id"],
                project=job["project"],
                kind=kind,
                name=name,
                step=step,
                attempt=attempt,
                size=stored.size,
                sha256=stored.sha256,
                content_type="application/octet-stream",
                details=details or {},
            )
        )


def add_points(job_id: str, name: str, points: Iterable[tuple[int, float]]) -> None:
    """Points (step, value) of one metric of attempt 1, stored as the ingest stores them."""
    with session_scope() as session:
        session.add_all(
            Metric(job_id=job_id, attempt=1, step=step, name=name, value=value)
            for step, value in points
        )


def add_series(job_id: str, name: str, values: list[float]) -> None:
    """One metric's values at steps 1, 2, ..."""
    add_points(job_id, name, enumerate(values, start=1))


def report_step(job_id: str, attempt: int, step: int, values: dict[str, float]) -> None:
    """One step's metrics of an attempt, and the job's latest values, as a rank reports them."""
    with session_scope() as session:
        job = session.get(Job, job_id)
        assert job is not None
        session.add_all(
            Metric(job_id=job_id, attempt=attempt, step=step, name=name, value=value)
            for name, value in values.items()
        )
        job.latest_metrics = {**job.latest_metrics, **values}


def platform_checkpoint(tmp_path: Path, job: dict[str, Any], step: int) -> None:
    """A checkpoint the platform's loop wrote (its archive lists meta.json)."""
    name = f"checkpoint-{step:09d}"
    add_artifact(tmp_path, job, name, "checkpoint", b"tar", step)
    with session_scope() as session:
        row = session.scalars(select(Artifact).where(Artifact.name == name)).one()
        row.details = {"files": [f"ckpt-{step:09d}/meta.json"]}
