"""A cancel that lands while a node claims the job: however the two interleave, the job ends
CANCELLED and every slot comes back. The releaser of the last claimed share ends a stopping
attempt; the reaper does for any it finds (core/allocations.py)."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import select, text

from ampfleet.core.capacity import used_slots_by_node
from ampfleet.core.db import session_scope
from ampfleet.core.lifecycle import transition
from ampfleet.core.models import Allocation, Job, JobEvent, Node, utcnow
from ampfleet.core.settings import get_settings
from ampfleet.core.states import ACTIVE_STATES, JobState
from ampfleet.scheduler.reaper import reap
from ampfleet.workers.agent import NodeAgent
from ampfleet.workers.node import Capacity
from tests.support.factories import insert_job

CPU = Capacity("cpu", 2, None, None)
TRIALS = 30
SETTLE_S = 30.0
"""How long a trial's job may take to end: a bound for the loop, far above what it takes."""


def _nodes(*names: str) -> None:
    with session_scope() as session:
        for name in names:
            if session.get(Node, name) is None:
                session.add(
                    Node(
                        id=name,
                        queue=f"node.{name}",
                        address="127.0.0.1",
                        accelerator="cpu",
                        slots=2,
                    )
                )


def _scheduled(nodes: tuple[str, ...], claimed: tuple[bool, ...] | None = None) -> str:
    """A job at attempt 1, SCHEDULED on `nodes` (node rank = position), one slot each."""
    job_id = insert_job(state=JobState.SCHEDULED, attempt=1, procs_per_node=1)
    with session_scope() as session:
        for rank, name in enumerate(nodes):
            session.add(
                Allocation(
                    job_id=job_id,
                    attempt=1,
                    node_id=name,
                    node_rank=rank,
                    slots=1,
                    launched_at=utcnow() if claimed and claimed[rank] else None,
                )
            )
    return job_id


def _cancel(session, job_id: str) -> bool:
    """What POST /v1/jobs/{id}/cancel does to a placed job."""
    return transition(
        session,
        job_id,
        JobState.CANCELLING,
        from_states=ACTIVE_STATES | {JobState.PREEMPTED},
        reason="cancel_requested",
        message="cancelled by request",
    )


def _state(job_id: str) -> str:
    with session_scope() as session:
        job = session.get(Job, job_id)
        assert job is not None
        return job.state


def _held() -> dict[str, int]:
    with session_scope() as session:
        return used_slots_by_node(session)


def _reasons(job_id: str) -> list[str]:
    with session_scope() as session:
        return list(
            session.scalars(
                select(JobEvent.reason).where(JobEvent.job_id == job_id).order_by(JobEvent.id)
            )
        )


def test_a_cancel_committed_between_the_claims_read_and_its_update(backend: str) -> None:
    """The exact window of the field report, made to happen: the node has claimed its row
    and read the job SCHEDULED; its UPDATE to STARTING waits on the job's row lock, held by
    the cancel; the cancel commits CANCELLING, the UPDATE then matches nothing, and the node
    launches nothing and lets go. The job must end CANCELLED, not wait in CANCELLING."""
    if backend != "postgres":
        pytest.skip("SQLite serialises writers: a claim's transaction cannot be overtaken")
    _nodes("node-x")
    job_id = _scheduled(("node-x",))
    agent = NodeAgent(get_settings().model_copy(update={"node_name": "node-x"}), CPU)
    failures: list[BaseException] = []

    def claim() -> None:
        try:
            agent.handle_start(job_id, 1, 0)
        except BaseException as error:  # reported by the test, not lost with the thread
            failures.append(error)

    claimer = threading.Thread(target=claim)
    with session_scope() as session:
        session.execute(select(Job.id).where(Job.id == job_id).with_for_update())
        claimer.start()
        waiting = 0
        for _ in range(600):  # the claimer reaches the lock within moments; bounded anyway
            with session_scope() as probe:
                waiting = probe.scalar(
                    text(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                        "AND datname = current_database()"
                    )
                )
            if waiting or not claimer.is_alive():
                break
            time.sleep(0.05)
        assert waiting == 1, "the claim never waited on the job's row"
        assert _cancel(session, job_id)
    claimer.join(timeout=60)
    assert not claimer.is_alive()
    assert failures == []
    assert agent.supervisor._requests.empty()  # nothing launched
    assert _state(job_id) == "CANCELLED"
    assert _held() == {}
    assert _reasons(job_id)[-2:] == ["cancel_requested", "cancelled"]


def test_cancels_racing_claims_all_end_cancelled_with_no_slot_held(backend: str) -> None:
    """Many trials of a cancel and a start message arriving together, on a two-node job
    whose first node never claims (so no rank is launched, whoever wins): the second node's
    claim either launches nothing, or waits for the rendezvous and lets go when it sees the
    cancel. Every job ends CANCELLED and no slot stays held."""
    _nodes("node-x", "node-y")
    agent = NodeAgent(get_settings().model_copy(update={"node_name": "node-y"}), CPU)
    agent.rendezvous.start()
    failures: list[BaseException] = []
    outcomes: dict[str, int] = {}
    try:
        for _ in range(TRIALS):
            job_id = _scheduled(("node-x", "node-y"))
            start = threading.Barrier(2)

            def claim(job_id: str = job_id, start: threading.Barrier = start) -> None:
                try:
                    start.wait(timeout=30)
                    agent.handle_start(job_id, 1, 1)
                except BaseException as error:
                    failures.append(error)

            def cancel(job_id: str = job_id, start: threading.Barrier = start) -> None:
                try:
                    start.wait(timeout=30)
                    with session_scope() as session:
                        _cancel(session, job_id)
                except BaseException as error:
                    failures.append(error)

            threads = [threading.Thread(target=claim), threading.Thread(target=cancel)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=60)
            assert failures == []
            deadline = time.monotonic() + SETTLE_S
            while _state(job_id) != "CANCELLED" and time.monotonic() < deadline:
                time.sleep(0.05)
            reasons = _reasons(job_id)
            assert _state(job_id) == "CANCELLED", reasons
            assert _held() == {}, reasons
            way = "claimed first" if "launching" in reasons else "cancelled first"
            outcomes[way] = outcomes.get(way, 0) + 1
    finally:
        agent.rendezvous.stop()
    assert agent.supervisor._requests.empty()  # no rank was ever launched
    print(f"\n{TRIALS} cancels racing claims on {backend}: {outcomes}")


def test_the_reaper_ends_stopping_attempts_that_no_node_holds(backend: str) -> None:
    """The backstop: a stopping attempt whose claimed shares are all released (or that none
    claimed) ends at the next pass, long before any start timeout; one that a node still
    holds keeps waiting for that node."""
    _nodes("node-x", "node-y")
    released = _scheduled(("node-x", "node-y"), claimed=(True, False))
    unclaimed = _scheduled(("node-x",))
    preempted = _scheduled(("node-x",))
    held = _scheduled(("node-x", "node-y"), claimed=(True, False))
    with session_scope() as session:
        for job_id in (released, unclaimed, held):
            assert _cancel(session, job_id)
        assert transition(
            session,
            preempted,
            JobState.PREEMPTED,
            from_states={JobState.SCHEDULED},
            reason="preempted",
        )
        # The claiming node let go of its share and died before it could end the job.
        session.execute(
            Allocation.__table__.update()
            .where(Allocation.job_id == released, Allocation.node_rank == 0)
            .values(released_at=utcnow())
        )
    with session_scope() as session:
        reap(session, get_settings(), utcnow())
    assert [_state(j) for j in (released, unclaimed, preempted, held)] == [
        "CANCELLED",
        "CANCELLED",
        "QUEUED",
        "CANCELLING",
    ]
    # Only the attempt still held keeps its rows (until it ends); the others' are all free.
    assert _held() == {"node-x": 1, "node-y": 1}
