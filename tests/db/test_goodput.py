"""Goodput from what the ranks report and what the allocation rows hold: a job that trained
to step 8, checkpointed at 6 and was restarted from there counts steps 7-8 as recomputed,
its launch as start-up, and every allocated slot-second lands in exactly one kind; a sweep's
trial that was pruned counts all it held as pruned; the API and /metrics show the same
figures (both backends)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from ampfleet.core import goodput
from ampfleet.core.db import session_scope
from ampfleet.core.models import Allocation, Job, Sweep, SweepTrial, utcnow
from ampfleet.core.settings import get_settings
from ampfleet.core.states import JobState
from ampfleet.workers.ingest import AttemptFeed, apply_records
from ampfleet.workers.rundir import RecordWriter, RunDir
from tests.support.factories import add_node, insert_job

SLOTS = 2


def _job(created: datetime) -> str:
    job_id = insert_job(state=JobState.RUNNING, attempt=1, procs_per_node=SLOTS)
    with session_scope() as session:
        session.execute(update(Job).where(Job.id == job_id).values(created_at=created))
    return job_id


def _held(job_id: str, attempt: int, placed: datetime, released: datetime | None) -> None:
    with session_scope() as session:
        for node_rank in range(SLOTS):  # one slot on each of two nodes
            session.add(
                Allocation(
                    job_id=job_id,
                    attempt=attempt,
                    node_id=f"node-{node_rank}",
                    node_rank=node_rank,
                    slots=1,
                    created_at=placed,
                    released_at=released,
                )
            )


def _usage(
    step: int, resumed: int, first: datetime, step_s: float, marks: list[list[float]]
) -> dict[str, object]:
    return {
        "step": step,
        "resumed_from_step": resumed,
        "first_step_at": first.timestamp(),
        "step_s": step_s,
        "recomputed_s": 0.0,
        "checkpoint_s": 0.5,
        "eval_s": 0.25,
        "marks": marks,
    }


def _forward(job_id: str, attempt: int, records: list[tuple[str, dict[str, object]]]) -> None:
    run_dir = RunDir.for_attempt(get_settings().runs_dir, job_id, attempt, 0)
    run_dir.path.mkdir(parents=True, exist_ok=True)
    writer = RecordWriter(run_dir.events_file, flush_s=0.0)
    for kind, fields in records:
        writer.write(kind, **fields)
    writer.close()
    feed = AttemptFeed(run_dir)
    with session_scope() as session:
        job = session.get(Job, job_id)
        assert job is not None
        job.attempt = attempt
        apply_records(session, job, attempt, feed.records.read_new(), feed, get_settings())
    feed.commit()


STARTED = {
    "total_steps": 10,
    "world_size": SLOTS,
    "backend": "gloo",
    "precision": "fp32",
    "allreduce_dtype": "fp32",
}


@pytest.fixture
def nodes(backend: str) -> None:
    for node_rank in range(SLOTS):
        add_node(f"node-{node_rank}", slots=1)


@pytest.fixture
def restarted_job(nodes: None) -> str:
    """Queued 5 s; attempt 1 held 2 slots 20 s: 2 s to its first step, 8 steps (6 s to the
    checkpoint at step 6, 8 s in all), then its node died. Queued 10 s again; attempt 2
    resumed at step 6, held 2 slots 10 s: 3 s to its first step, 4 steps in 4 s."""
    t0 = utcnow() - timedelta(minutes=5)
    job_id = _job(created=t0 - timedelta(seconds=5))
    _held(job_id, 1, t0, t0 + timedelta(seconds=20))
    first = t0 + timedelta(seconds=2)
    _forward(
        job_id,
        1,
        [
            ("started", {**STARTED, "resumed_from_step": 0}),
            ("usage", _usage(5, 0, first, 5.0, [])),
            ("usage", _usage(8, 0, first, 8.0, [[6, 6.0]])),
            ("usage", _usage(4, 0, first, 4.0, [])),  # replayed and older: changes nothing
        ],
    )
    t1 = t0 + timedelta(seconds=30)
    _held(job_id, 2, t1, t1 + timedelta(seconds=10))
    _forward(
        job_id,
        2,
        [
            ("started", {**STARTED, "resumed_from_step": 6}),
            ("usage", _usage(10, 6, t1 + timedelta(seconds=3), 4.0, [[10, 4.0]])),
        ],
    )
    return job_id


def test_every_allocated_slot_second_lands_in_one_kind(restarted_job: str) -> None:
    with session_scope() as session:
        job = session.get(Job, restarted_job)
        assert job is not None
        counted = goodput.of_job(session, job)
    assert counted.attempts == 2
    assert counted.allocated_slot_s == pytest.approx(SLOTS * (20 + 10))
    assert counted.training_slot_s == pytest.approx(SLOTS * (6.0 + 4.0))
    assert counted.recomputed_slot_s == pytest.approx(SLOTS * 2.0)  # steps 7-8 of attempt 1
    assert counted.startup_slot_s == pytest.approx(SLOTS * (2 + 3))
    assert counted.checkpoint_slot_s == pytest.approx(SLOTS * 0.5 * 2)
    assert counted.evaluation_slot_s == pytest.approx(SLOTS * 0.25 * 2)
    kinds = sum(getattr(counted, f"{kind}_slot_s") for kind in goodput.KINDS)
    assert kinds == pytest.approx(counted.allocated_slot_s)
    assert counted.other_slot_s == pytest.approx(SLOTS * 30 - SLOTS * (10 + 2 + 5 + 1 + 0.5))
    assert counted.queued_s == pytest.approx(5 + 10)
    assert counted.ratio == pytest.approx(20 / 60)


def test_each_attempt_has_its_share_and_they_add_up(restarted_job: str) -> None:
    with session_scope() as session:
        job = session.get(Job, restarted_job)
        assert job is not None
        total = goodput.of_job(session, job)
        first, second = goodput.of_attempts(session, job).values()
    # The lost attempt: its launch, 6 s kept, steps 7-8 recomputed, and its tail after the
    # last report; the restart: its own start-up before it resumed.
    assert (first.allocated_slot_s, first.training_slot_s) == (SLOTS * 20.0, SLOTS * 6.0)
    assert first.recomputed_slot_s == pytest.approx(SLOTS * 2.0)
    assert first.startup_slot_s == pytest.approx(SLOTS * 2.0)
    assert first.other_slot_s == pytest.approx(SLOTS * (20 - 6 - 2 - 2 - 0.5 - 0.25))
    assert second.startup_slot_s == pytest.approx(SLOTS * 3.0)
    assert (first.queued_s, second.queued_s) == (pytest.approx(5.0), pytest.approx(10.0))
    added = goodput.Goodput()
    for part in (first, second):
        added.add(part)
    assert added.as_dict() == total.as_dict()


def test_an_attempt_that_never_stepped_is_all_start_up(nodes: None) -> None:
    t0 = utcnow() - timedelta(minutes=1)
    job_id = _job(created=t0)
    _held(job_id, 1, t0, t0 + timedelta(seconds=7))
    with session_scope() as session:
        job = session.get(Job, job_id)
        assert job is not None
        counted = goodput.of_job(session, job)
    assert (counted.allocated_slot_s, counted.startup_slot_s) == (SLOTS * 7.0, SLOTS * 7.0)
    assert counted.training_slot_s == 0
    assert counted.ratio == 0


def test_the_api_and_metrics_show_the_same_goodput(restarted_job: str, client: TestClient) -> None:
    shown = client.get(f"/v1/jobs/{restarted_job}").json()["goodput"]
    assert shown["training_slot_s"] == pytest.approx(20.0)
    assert shown["recomputed_slot_s"] == pytest.approx(4.0)
    assert shown["ratio"] == pytest.approx(20 / 60, abs=1e-4)
    listed = client.get("/v1/jobs").json()["items"]
    assert [job["goodput"] for job in listed] == [None]  # lists leave it out
    project = client.get("/v1/projects/default").json()["goodput"]
    assert project["allocated_slot_s"] == pytest.approx(60.0)
    assert project["training_slot_s"] == pytest.approx(20.0)
    text = client.get("/metrics").text
    assert 'ampfleet_project_slot_seconds{project="default",kind="recomputed"} 4.000' in text
    assert 'ampfleet_project_goodput_ratio{project="default"} 0.3333' in text


def test_a_dead_nodes_unreleased_rows_count_until_the_next_attempt(nodes: None) -> None:
    """A dead node's rows are released only by its next worker, which may never come."""
    t0 = utcnow() - timedelta(minutes=2)
    job_id = _job(created=t0)
    _held(job_id, 1, t0, None)
    _held(job_id, 2, t0 + timedelta(seconds=30), t0 + timedelta(seconds=40))
    with session_scope() as session:
        job = session.get(Job, job_id)
        assert job is not None
        counted = goodput.of_job(session, job)
    assert counted.allocated_slot_s == pytest.approx(SLOTS * (30 + 10))
    assert counted.queued_s == pytest.approx(0.0)


def test_a_project_counts_only_its_jobs_within_the_window(restarted_job: str) -> None:
    with session_scope() as session:
        assert goodput.by_project(session, 3600.0, "other") == {}
        assert set(goodput.by_project(session, 3600.0)) == {"default"}
        assert goodput.by_project(session, 1.0) == {}  # submitted 5 minutes ago


def _a_trial_of_a_sweep(job_id: str, state: str) -> None:
    with session_scope() as session:
        session.add(
            Sweep(id="swp_goodput", project="default", spec={}, base_resolved={}, state="RUNNING")
        )
        session.flush()
        trial = {"number": 0, "job_id": job_id, "state": state}
        session.add(SweepTrial(sweep_id="swp_goodput", **trial, params={}, distributions={}))
        session.execute(update(Job).where(Job.id == job_id).values(sweep_id="swp_goodput"))


def test_a_pruned_trial_counts_all_it_held_as_pruned(
    restarted_job: str, client: TestClient
) -> None:
    _a_trial_of_a_sweep(restarted_job, "pruned")
    with session_scope() as session:
        job = session.get(Job, restarted_job)
        assert job is not None
        counted = goodput.of_job(session, job)
        attempts = goodput.of_attempts(session, job)
    assert counted.pruned_slot_s == pytest.approx(SLOTS * (20 + 10))
    assert counted.pruned_slot_s == counted.allocated_slot_s
    for kind in set(goodput.KINDS) - {"pruned"}:
        assert getattr(counted, f"{kind}_slot_s") == 0, kind
    assert counted.queued_s == pytest.approx(5 + 10)  # waiting is not slot-seconds
    assert sum(a.pruned_slot_s for a in attempts.values()) == pytest.approx(60.0)
    shown = client.get(f"/v1/jobs/{restarted_job}").json()["goodput"]
    assert (shown["pruned_slot_s"], shown["training_slot_s"]) == (pytest.approx(60.0), 0)
    project = client.get("/v1/projects/default").json()["goodput"]
    assert project["pruned_slot_s"] == pytest.approx(60.0)
    assert project["ratio"] == 0
    text = client.get("/metrics").text
    assert 'ampfleet_project_slot_seconds{project="default",kind="pruned"} 60.000' in text
    assert 'ampfleet_project_slot_seconds{project="default",kind="training"} 0.000' in text


def test_a_trial_that_completed_counts_as_any_job(restarted_job: str) -> None:
    _a_trial_of_a_sweep(restarted_job, "complete")
    with session_scope() as session:
        job = session.get(Job, restarted_job)
        assert job is not None
        counted = goodput.of_job(session, job)
    assert counted.pruned_slot_s == 0
    assert counted.training_slot_s == pytest.approx(SLOTS * (6.0 + 4.0))
