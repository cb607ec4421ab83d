"""The agent hands an attempt the fallbacks of the job's earlier attempts (from its events),
so a model exported on another node still lists every fallback the job took."""

from __future__ import annotations

from ampfleet.core.db import session_scope
from ampfleet.core.models import JobEvent
from ampfleet.core.states import JobState
from ampfleet.workers.fallbacks import earlier_fallbacks
from tests.support.factories import insert_job


def test_earlier_attempts_fallbacks_and_nothing_else(backend: str) -> None:
    job_id = insert_job(state=JobState.RUNNING, attempt=2)
    with session_scope() as session:
        for attempt, reason, message in [
            (0, "precision_fallback", "fp16 -> bf16"),
            (1, "node_lost", "node b stopped heartbeating"),
            (1, "allreduce_fallback", "bf16 -> fp32"),
            (2, "precision_fallback", "this attempt's own: read from its records"),
        ]:
            session.add(
                JobEvent(
                    job_id=job_id, attempt=attempt, kind="info", reason=reason, message=message
                )
            )
    with session_scope() as session:
        found = earlier_fallbacks(session, job_id, 2)
    assert [(e["attempt"], e["reason"], e["message"]) for e in found] == [
        (0, "precision_fallback", "fp16 -> bf16"),
        (1, "allreduce_fallback", "bf16 -> fp32"),
    ]
    assert all(isinstance(e["time"], float) for e in found)
