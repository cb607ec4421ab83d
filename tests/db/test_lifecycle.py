"""Fenced transitions on both databases: one winner, events for every change, terminal is final."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from ampfleet.core.allocations import release_node_share
from ampfleet.core.capacity import used_slots_by_node
from ampfleet.core.db import session_scope
from ampfleet.core.lifecycle import IllegalTransitionError, requeue_or_fail, transition
from ampfleet.core.models import Allocation, Job, JobEvent, Node, utcnow
from ampfleet.core.settings import get_settings
from ampfleet.core.states import ALLOWED_TRANSITIONS, TERMINAL_STATES, JobState
from ampfleet.workers.agent import NodeAgent
from ampfleet.workers.node import Capacity
from tests.support.factories import insert_job

CPU = Capacity("cpu", 2, None, None)


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
    # A launch goes through the single restore thread first; a no-op queued behind the
    # starts returns once every launch they asked for has reached the supervisor's queue.
    agent.supervisor.uploads._restores.submit(lambda: None).result(timeout=60)
    launched = []
    while not agent.supervisor._requests.empty():
        launched.append(agent.supervisor._requests.get_nowait())
    assert [(r.job_id, r.attempt) for r in launched] == [(job_id, 1)]
    job_file = json.loads(launched[0].run_dir.job_file.read_text())
    # No monitoring.hang_timeout_s in the spec: the node's; collectives time out after it.
    assert launched[0].hang_timeout_s == settings.hang_timeout_s
    assert job_file["process_group_timeout_s"] == settings.hang_timeout_s + 60
    assert job_file["node"] == settings.node_name
    assert job_file["earlier_fallbacks"] == []
    with session_scope() as session:
        job = session.get(Job, job_id)
        assert job is not None
        assert job.state == "STARTING"
        node = session.get(Node, settings.node_name)
        assert node is not None


def _node(session: Session, name: str) -> None:
    session.add(
        Node(id=name, queue=f"node.{name}", address="127.0.0.1", accelerator="cpu", slots=2)
    )


def _two_node_attempt(state: JobState, *, claimed: tuple[bool, bool]) -> str:
    """A job at attempt 1 on node-x (node rank 0) and node-y (node rank 1), one slot each."""
    job_id = insert_job(state=state, attempt=1, procs_per_node=1)
    with session_scope() as session:
        for name in ("node-x", "node-y"):
            if session.get(Node, name) is None:
                _node(session, name)
        session.flush()
        for rank, name in enumerate(("node-x", "node-y")):
            session.add(
                Allocation(
                    job_id=job_id,
                    attempt=1,
                    node_id=name,
                    node_rank=rank,
                    slots=1,
                    launched_at=utcnow() if claimed[rank] else None,
                )
            )
    return job_id


def used() -> dict[str, int]:
    with session_scope() as session:
        return used_slots_by_node(session)


def test_an_ended_attempt_keeps_each_node_share_until_that_node_lets_go(backend: str) -> None:
    # Node x's ranks exited and it recorded the outcome; node y's torchrun is still exiting.
    job_id = _two_node_attempt(JobState.RUNNING, claimed=(True, True))
    with session_scope() as session:
        assert transition(
            session, job_id, JobState.SUCCEEDED, from_states={JobState.RUNNING}, reason="done"
        )
        release_node_share(session, job_id, 1, 0)
    assert used() == {"node-y": 1}
    with session_scope() as session:
        release_node_share(session, job_id, 1, 1)
    assert used() == {}


def test_ending_an_attempt_frees_and_fences_what_no_node_claimed(backend: str) -> None:
    job_id = _two_node_attempt(JobState.STARTING, claimed=(True, False))
    with session_scope() as session:
        assert requeue_or_fail(session, job_id, 1, reason="node_lost", message="x") == (
            JobState.QUEUED
        )
    assert used() == {"node-x": 1}  # its ranks may still run: requeued is not exited
    agent = NodeAgent(get_settings().model_copy(update={"node_name": "node-y"}), CPU)
    agent.handle_start(job_id, 1, 1)  # the late start message launches nothing
    assert agent.supervisor._requests.empty()
    with session_scope() as session:
        assert session.get(Job, job_id).state == "QUEUED"  # type: ignore[union-attr]


def test_a_claim_that_launches_nothing_gives_the_slots_back(backend: str) -> None:
    job_id = _two_node_attempt(JobState.CANCELLING, claimed=(False, False))
    agent = NodeAgent(get_settings().model_copy(update={"node_name": "node-x"}), CPU)
    agent.handle_start(job_id, 1, 0)
    assert agent.supervisor._requests.empty()
    assert used() == {}  # node-y's unclaimed share went with the CANCELLED transition
    assert states_of(job_id)[-1] == ("CANCELLING", "CANCELLED")


def test_a_restarted_node_frees_what_it_had_claimed(backend: str) -> None:
    job_id = _two_node_attempt(JobState.RUNNING, claimed=(True, True))
    agent = NodeAgent(get_settings().model_copy(update={"node_name": "node-x"}), CPU)
    with session_scope() as session:
        agent._recover_orphans(session)
    assert used() == {"node-y": 1}
    assert states_of(job_id)[-2:] == [("RUNNING", "RESTARTING"), ("RESTARTING", "QUEUED")]


def test_a_preempted_job_being_cancelled_holds_its_slots(client: TestClient) -> None:
    job_id = _two_node_attempt(JobState.PREEMPTED, claimed=(True, True))
    response = client.post(f"/v1/jobs/{job_id}/cancel")
    assert response.status_code in (200, 202), response.text
    assert response.json()["state"] == "CANCELLING"
    assert used() == {"node-x": 1, "node-y": 1}
    nodes = {n["id"]: n for n in client.get("/v1/nodes").json()["items"]}
    assert nodes["node-x"]["used_slots"] == nodes["node-y"]["used_slots"] == 1


def test_a_follower_node_waits_for_the_rendezvous_off_the_calling_thread(backend: str) -> None:
    job_id = _two_node_attempt(JobState.STARTING, claimed=(True, False))
    agent = NodeAgent(get_settings().model_copy(update={"node_name": "node-y"}), CPU)
    agent.rendezvous.start()
    try:
        agent.handle_start(job_id, 1, 1)  # returns at once: the endpoint is not known yet
        assert agent.supervisor._requests.empty()
        with session_scope() as session:
            session.execute(
                update(Allocation)
                .where(Allocation.job_id == job_id, Allocation.node_rank == 0)
                .values(rendezvous="127.0.0.1:29400")
            )
        request = agent.supervisor._requests.get(timeout=30)
    finally:
        agent.rendezvous.stop()
    assert (request.job_id, request.node_rank, request.rendezvous) == (job_id, 1, "127.0.0.1:29400")


def test_a_multi_node_claim_names_every_node_s_address_for_its_sandbox(backend: str) -> None:
    """What a multi-node attempt's sandboxed ranks may connect to (workers/egress.py)."""
    job_id = _two_node_attempt(JobState.SCHEDULED, claimed=(False, False))
    with session_scope() as session:
        for name, address in (("node-x", "127.0.0.2"), ("node-y", "127.0.0.3")):
            session.execute(update(Node).where(Node.id == name).values(address=address))
    settings = get_settings().model_copy(
        update={"node_name": "node-y", "node_address": "127.0.0.3"}
    )
    request = NodeAgent(settings, CPU)._claim(job_id, 1, 1)
    assert request is not None
    assert sorted(request.peers) == ["127.0.0.2", "127.0.0.3"]
