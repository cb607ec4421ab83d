"""Insert jobs straight into the database, bypassing the API (for lifecycle tests)."""

from __future__ import annotations

from ampfleet.api.jobs.service import resolve
from ampfleet.core.db import session_scope
from ampfleet.core.ids import new_id
from ampfleet.core.models import Job, JobEvent
from ampfleet.core.spec import JobSpec
from ampfleet.core.states import JobState


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
