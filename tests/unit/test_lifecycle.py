"""Fenced transitions on both databases: one winner, events for every change, terminal is final."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from ampfleet.core.db import session_scope
from ampfleet.core.lifecycle import IllegalTransitionError, requeue_or_fail, transition
from ampfleet.core.models import Allocation, Job, JobEvent, Node
from ampfleet.core.states import ALLOWED_TRANSITIONS, TERMINAL_STATES, JobState
from ampfleet.workers.agent import NodeAgent
from ampfleet.workers.node import Capacity
from tests.support.jobs import insert_job


def states_of(job_id: str) -> list[tuple[str | None, str | None]]:
    with session_scope() as session:
        events = session.scalars(select(JobEvent).where(JobEvent.job_id == job_id)).all()
        return [(e.from_state, e.to_state) for e in events]


def test_terminal_states_allow_nothing() -> None:
    for state in TERMINAL_STATES:
        assert ALLOWED_TRANSITIONS[state] == frozenset()


def test_illegal_transition_is_refused(backend: str) -> None:
    job_id = insert_job()
    with session_scope() as session, pytest.raises(IllegalTransitionError):
        transition(session, job_id, JobState.RUNNING, from_states={JobState.QUEUED}, reason="x")


def test_only_one_of_two_racing_transitions_wins(backend: str) -> None:
    job_id = insert_job()
    with session_scope() as session:
        first = transition(
            session,
            job_id,
            JobState.SCHEDULED,
            from_states={JobState.QUEUED},
            attempt=0,
            new_attempt=1,
            reason="placed",
        )
        second = transition(
            session,
            job_id,
            JobState.SCHEDULED,
            from_states={JobState.QUEUED},
            attempt=0,
            new_attempt=1,
            reason="placed",
        )
    assert (first, second) == (True, False)
    assert states_of(job_id) == [(None, "QUEUED"), ("QUEUED", "SCHEDULED")]


def test_stale_attempt_changes_nothing(backend: str) -> None:
    job_id = insert_job(state=JobState.RUNNING, attempt=3)
    with session_scope() as session:
        changed = transition(
            session,
            job_id,
            JobState.SUCCEEDED,
            from_states={JobState.RUNNING},
            attempt=2,
            reason="completed",
        )
        job = session.get(Job, job_id)
        assert job is not None
        assert (changed, job.state) == (False, "RUNNING")


def test_requeue_until_restarts_run_out(backend: str) -> None:
    job_id = insert_job(state=JobState.RUNNING, attempt=1, max_restarts=1)
    with session_scope() as session:
        assert requeue_or_fail(session, job_id, 1, reason="node_lost", message="gone") == (
            JobState.QUEUED
        )
    with session_scope() as session:
        transition(
            session,
            job_id,
            JobState.SCHEDULED,
            from_states={JobState.QUEUED},
            new_attempt=2,
            reason="placed",
        )
        assert requeue_or_fail(session, job_id, 2, reason="node_lost", message="gone again") == (
            JobState.FAILED
        )
        job = session.get(Job, job_id)
        assert job is not None
        assert "gone again" in (job.failure_reason or "")
    assert states_of(job_id) == [
        (None, "RUNNING"),
        ("RUNNING", "RESTARTING"),
        ("RESTARTING", "QUEUED"),
        ("QUEUED", "SCHEDULED"),
        ("SCHEDULED", "RESTARTING"),
        ("RESTARTING", "FAILED"),
    ]


def test_duplicate_start_message_launches_once(backend: str) -> None:
    job_id = insert_job(state=JobState.SCHEDULED, attempt=1)
    from ampfleet.core.settings import get_settings

    settings = get_settings()
    agent = NodeAgent(settings, Capacity("cpu", 2, None, None))
    with session_scope() as session:
        agent._register(session)
    with session_scope() as session:
        session.add(
            Allocation(job_id=job_id, attempt=1, node_id=settings.node_name, node_rank=0, slots=2)
        )
    agent.handle_start(job_id, 1, 0)
    agent.handle_start(job_id, 1, 0)  # redelivered
    agent.handle_start(job_id, 0, 0)  # stale attempt
    launched = []
    while not agent.supervisor._requests.empty():
        launched.append(agent.supervisor._requests.get_nowait())
    assert [(r.job_id, r.attempt) for r in launched] == [(job_id, 1)]
    assert launched[0].run_dir.job_file.exists()
    with session_scope() as session:
        job = session.get(Job, job_id)
        assert job is not None
        assert job.state == "STARTING"
        node = session.get(Node, settings.node_name)
        assert node is not None
