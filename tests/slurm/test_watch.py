"""The watcher's transitions (scheduler/slurm/watch.py) for each Slurm end state, on a real
database: what the real cluster cannot be made to show in a test (22.05 ends a job whose
step ran out of its cgroup's memory FAILED, not OUT_OF_MEMORY; preemption needs a second
partition and QoS of its own), and what it shows only after minutes (a node failure, a
time limit), each in one pass. The cluster's own runs of these are in test_jobs.py."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from ampfleet.core.db import session_scope
from ampfleet.core.models import Allocation, Job, JobEvent, Node, utcnow
from ampfleet.core.settings import Settings
from ampfleet.core.states import JobState
from ampfleet.scheduler.slurm.backend import SlurmBackend
from ampfleet.scheduler.slurm.client import SlurmJob, SlurmNode
from ampfleet.scheduler.slurm.names import slurm_job_name
from ampfleet.scheduler.slurm.watch import watch_jobs
from tests.support.factories import add_node, insert_job

SLURM_ID = 41


def running_attempt(
    *, state: JobState = JobState.RUNNING, attempt: int = 1, max_restarts: int = 2
) -> str:
    """A job whose attempt holds (claimed) slots on two of the pool's nodes."""
    job_id = insert_job(state=state, attempt=attempt, max_restarts=max_restarts)
    with session_scope() as session:
        for rank in range(2):
            session.add(
                Allocation(
                    job_id=job_id,
                    attempt=attempt,
                    node_id=f"hpc-node{rank + 1}",
                    node_rank=rank,
                    slots=1,
                    launched_at=session.get(Job, job_id).created_at,  # type: ignore[union-attr]
                )
            )
    return job_id


def slurm_says(job_id: str, state: str, attempt: int = 1, reason: str = "") -> list[int]:
    """One pass's watch of the Slurm job of `job_id`'s attempt in `state`."""
    found = SlurmJob(
        job_id=SLURM_ID,
        name=slurm_job_name(job_id, attempt),
        state=state,
        reason=reason,
        nodes="node[1-2]",
        exit_code=None,
    )
    with session_scope() as session:
        return watch_jobs(session, [found])


def outcome(job_id: str) -> tuple[str, int, list[str], bool]:
    """(state, attempt, the events' reasons, whether every allocation was released)."""
    with session_scope() as session:
        job = session.get(Job, job_id)
        assert job is not None
        reasons = list(session.scalars(select(JobEvent.reason).where(JobEvent.job_id == job_id)))
        released = all(
            a.released_at is not None
            for a in session.scalars(select(Allocation).where(Allocation.job_id == job_id))
        )
        return job.state, job.attempt, reasons, released


@pytest.fixture(autouse=True)
def pool_nodes(backend: str) -> None:
    for name in ("node1", "node2"):
        add_node(f"hpc-{name}", slots=1, accelerator="cpu")


def test_a_time_limit_slurm_alone_saw_ends_the_attempt_timed_out() -> None:
    job_id = running_attempt()
    assert slurm_says(job_id, "TIMEOUT") == []
    state, attempt, reasons, released = outcome(job_id)
    assert (state, attempt, released) == ("TIMED_OUT", 1, True)
    assert "slurm_timeout" in reasons


def test_out_of_memory_fails_the_job_without_spending_a_restart() -> None:
    job_id = running_attempt(max_restarts=5)
    slurm_says(job_id, "OUT_OF_MEMORY")
    state, attempt, reasons, released = outcome(job_id)
    assert (state, attempt, released) == ("FAILED", 1, True)
    assert "slurm_out_of_memory" in reasons
    with session_scope() as session:
        job = session.get(Job, job_id)
        assert job is not None
        assert "ran out of memory" in (job.failure_reason or "")


@pytest.mark.parametrize(
    ("slurm_state", "reason"),
    [("NODE_FAIL", "slurm_node_fail"), ("PREEMPTED", "slurm_preempted")],
)
def test_a_lost_node_or_a_preemption_is_retried(slurm_state: str, reason: str) -> None:
    job_id = running_attempt()
    slurm_says(job_id, slurm_state, reason="NodeDown")
    state, _, reasons, released = outcome(job_id)
    assert state == "QUEUED"
    assert released
    assert reason in reasons


def test_past_its_restarts_a_lost_node_fails_the_job() -> None:
    job_id = running_attempt(max_restarts=0)
    slurm_says(job_id, "NODE_FAIL")
    assert outcome(job_id)[0] == "FAILED"


def test_an_end_the_agents_already_recorded_is_said_once_and_frees_the_slots() -> None:
    """The agents requeued the attempt (a SIGTERM) and were killed before they gave the
    slots back: Slurm's end frees them, and is added to the events once."""
    job_id = running_attempt(state=JobState.QUEUED)
    for _ in range(2):
        assert slurm_says(job_id, "PREEMPTED") == []
    state, _, reasons, released = outcome(job_id)
    assert state == "QUEUED"
    assert released
    assert reasons.count("slurm_preempted") == 1


def test_a_slurm_job_of_an_attempt_no_longer_run_is_to_be_cancelled() -> None:
    job_id = running_attempt(state=JobState.CANCELLED)
    assert slurm_says(job_id, "RUNNING") == [SLURM_ID]
    assert slurm_says(job_id, "PENDING", attempt=2) == [SLURM_ID]


def test_a_running_attempt_is_left_alone() -> None:
    job_id = running_attempt()
    assert slurm_says(job_id, "RUNNING") == []
    assert outcome(job_id)[:2] == ("RUNNING", 1)


def test_a_finished_attempts_slurm_job_cancelled_while_its_agents_exit_is_not_news() -> None:
    """Slurm was read while the agents that recorded SUCCEEDED were still exiting: the
    watcher cancels that Slurm job, whose CANCELLED end is then its own doing."""
    job_id = running_attempt(state=JobState.SUCCEEDED)
    assert slurm_says(job_id, "RUNNING") == [SLURM_ID]
    slurm_says(job_id, "CANCELLED")
    state, _, reasons, released = outcome(job_id)
    assert (state, released) == ("SUCCEEDED", True)
    assert "slurm_cancelled" not in reasons


def test_a_node_slurm_takes_out_of_service_tells_the_attempts_running_there() -> None:
    """Before any end of theirs: a node that stopped answering Slurm (killed outright) is
    cordoned, and the attempts with a share on it hear which node and Slurm's words."""
    job_id = running_attempt()
    backend = SlurmBackend(Settings(slurm_pool="hpc", slurm_url="unix:/nonexistent"))
    seen = [
        SlurmNode("node1", "allocated", 1, 1, 0, 1000, ("ampfleet",)),
        SlurmNode("node2", "allocated+not_responding", 1, 1, 0, 1000, ("ampfleet",)),
    ]
    for _ in range(2):
        with session_scope() as session:
            backend.mirror_nodes(session, seen, utcnow())
    with session_scope() as session:
        states = {n.id: (n.state, n.state_reason) for n in session.scalars(select(Node))}
    assert states["hpc-node1"] == ("ready", None)
    assert states["hpc-node2"] == ("cordoned", "Slurm: allocated+not_responding")
    with session_scope() as session:
        told = session.scalars(
            select(JobEvent).where(JobEvent.reason == "slurm_node_out_of_service")
        ).all()
        assert [(e.job_id, e.attempt) for e in told] == [(job_id, 1)]
        assert "node2" in told[0].message
        assert "not_responding" in told[0].message
