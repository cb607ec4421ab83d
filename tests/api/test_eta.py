"""A running job's ETA comes from its pace over its latest reports, not since it started,
and says how far to trust it (api/jobs/eta.py)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import insert, update

from ampfleet.api.jobs import eta
from ampfleet.core.db import session_scope
from ampfleet.core.models import Allocation, Job, Metric, utcnow
from tests.support.factories import add_node, job_spec

NOW = utcnow()
"""The moment a test's reports are placed against, taken again as each test starts: taken
once at import, it was minutes old when a test ran late in a long run, and the served ETA,
counted down to the request's own moment, had reached 0."""


@pytest.fixture(autouse=True)
def _now_is_when_the_test_starts() -> None:
    global NOW  # noqa: PLW0603 - the helpers below and the tests read the one moment
    NOW = utcnow()


def running(client: TestClient, *, step: int, **spec: Any) -> str:
    """A RUNNING attempt 1 that started ten minutes ago (a slow start-up: imports, data)."""
    job_id: str = client.post("/v1/jobs", json=job_spec(**spec)).json()["id"]
    with session_scope() as session:
        session.execute(
            update(Job)
            .where(Job.id == job_id)
            .values(state="RUNNING", attempt=1, step=step, started_at=NOW - timedelta(minutes=10))
        )
    return job_id


def report(
    job_id: str, name: str, points: list[tuple[int, float, float]], attempt: int = 1
) -> None:
    """(step, value, seconds before NOW it was stored) per point."""
    with session_scope() as session:
        session.execute(
            insert(Metric),
            [
                {
                    "job_id": job_id,
                    "attempt": attempt,
                    "step": step,
                    "name": name,
                    "value": value,
                    "time": NOW - timedelta(seconds=ago),
                }
                for step, value, ago in points
            ],
        )


def estimated(job_id: str, now: datetime | None = None) -> eta.Estimate:
    with session_scope() as session:
        job = session.get(Job, job_id)
        assert job is not None
        return eta.estimate(job, now or NOW)


def test_a_steady_pace_after_a_slow_start_gives_a_confident_eta(client: TestClient) -> None:
    # 100 steps of 1000, one report every 10 steps, 2 steps/s: 450 s left. The pace since
    # the start (100 steps in 10 minutes) would say 5400 s.
    job_id = running(client, step=100, stop={"max_steps": 1000})
    report(job_id, "loss", [(s, 1.0, (100 - s) / 2) for s in range(10, 101, 10)])
    report(job_id, "loss", [(1000, 1.0, 0.0)], attempt=0)  # an earlier attempt's: not counted
    shown = estimated(job_id)
    assert shown.steps_per_s == pytest.approx(2.0)
    assert shown.eta_seconds == pytest.approx(450.0)
    assert shown.confidence == "high"
    # Between reports the clock runs on: 10 s after the last one, 10 s less.
    assert estimated(job_id, NOW + timedelta(seconds=10)).eta_seconds == pytest.approx(440.0)
    served = client.get(f"/v1/jobs/{job_id}").json()["progress"]
    assert served["eta_confidence"] == "high"
    assert served["steps_per_s"] == pytest.approx(2.0)
    assert 0 < served["eta_seconds"] <= 450.0  # less the time between NOW and the request


def test_few_reports_or_an_unsteady_pace_say_so(client: TestClient) -> None:
    two = running(client, step=20, stop={"max_steps": 100})
    report(two, "loss", [(10, 1.0, 5.0), (20, 1.0, 0.0)])
    assert (estimated(two).eta_seconds, estimated(two).confidence) == (pytest.approx(40.0), "low")

    three = running(client, step=30, stop={"max_steps": 100})
    report(three, "loss", [(10, 1.0, 10.0), (20, 1.0, 5.0), (30, 1.0, 0.0)])
    assert estimated(three).confidence == "medium"

    # Many reports over a minute, but the second half ran at half the pace of the first.
    unsteady = running(client, step=120, stop={"max_steps": 1000})
    fast = [(s, 1.0, 60 - (s / 4)) for s in range(10, 81, 10)]  # 4 steps/s
    slow = [(s, 1.0, 40 - (s - 80) / 2) for s in range(90, 121, 10)]  # 2 steps/s
    report(unsteady, "loss", fast + slow)
    assert estimated(unsteady).confidence == "medium"


def test_points_stored_in_one_pass_count_as_one_report(client: TestClient) -> None:
    job_id = running(client, step=30, stop={"max_steps": 100})
    report(job_id, "loss", [(10, 1.0, 10.0), (20, 1.0, 0.0), (30, 1.0, 0.0)])
    shown = estimated(job_id)
    assert shown.steps_per_s == pytest.approx(2.0)  # 20 steps between the two passes
    assert shown.confidence == "low"


def test_the_first_report_alone_is_paced_by_its_step_time(client: TestClient) -> None:
    job_id = running(client, step=10, stop={"max_steps": 110})
    report(job_id, "loss", [(10, 2.3, 0.0)])
    report(job_id, "step_time_s", [(10, 0.5, 0.0)])
    shown = estimated(job_id)
    assert (shown.eta_seconds, shown.steps_per_s, shown.confidence) == (50.0, 2.0, "low")


def test_a_runtime_only_job_has_what_is_left_of_its_time(client: TestClient) -> None:
    job_id = running(client, step=10, stop={"max_runtime_s": 100})
    with session_scope() as session:
        session.execute(update(Job).where(Job.id == job_id).values(total_steps=None))
    add_node("node-eta")
    with session_scope() as session:
        session.add(
            Allocation(
                job_id=job_id,
                attempt=1,
                node_id="node-eta",
                node_rank=0,
                slots=2,
                launched_at=NOW - timedelta(seconds=30),
            )
        )
    shown = estimated(job_id)
    assert (shown.eta_seconds, shown.confidence) == (pytest.approx(70.0), "high")


def test_no_eta_unless_it_runs_and_has_reported(client: TestClient) -> None:
    queued = client.post("/v1/jobs", json=job_spec()).json()["id"]
    assert estimated(queued) == eta.Estimate()
    silent = running(client, step=10, stop={"max_steps": 100})
    assert estimated(silent) == eta.Estimate()
    progress = client.get(f"/v1/jobs/{silent}").json()["progress"]
    assert (progress["eta_seconds"], progress["eta_confidence"]) == (None, None)
