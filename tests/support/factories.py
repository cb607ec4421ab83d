"""Keyword-only builders of test inputs and database rows: job specs, jobs submitted over
the API, and jobs inserted straight into the database (bypassing the API, for lifecycle tests)."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import func, select

from ampfleet.api.jobs.service import resolve
from ampfleet.core.db import session_scope
from ampfleet.core.ids import new_id
from ampfleet.core.models import Job, JobEvent, Metric, Node, OutboxMessage, utcnow
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
