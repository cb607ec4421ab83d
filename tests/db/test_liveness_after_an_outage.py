"""A database outage longer than the node timeout is the judge's own silence, not the nodes':
on a PostgreSQL server of the test's own, really stopped and started again, the scheduler
restarts no job for heartbeats the nodes could not write while it was down, and still calls
a node lost once it has been silent for a whole node timeout after the database came back.
(tests/faults/test_faults.py runs the same outage under a whole fleet, with training.)"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, update

from ampfleet.core.db import session_scope
from ampfleet.core.migrate import upgrade
from ampfleet.core.models import Allocation, Job, JobEvent, Node, utcnow
from ampfleet.core.states import JobState
from ampfleet.scheduler.loop import Scheduler
from tests.support.env import environment
from tests.support.factories import add_node, insert_job
from tests.support.private_services import PrivatePostgres, private_postgres

NODE_TIMEOUT_S = 2.0


@pytest.fixture
def postgres(tmp_path: Path) -> Iterator[PrivatePostgres]:
    with private_postgres() as server:
        upgrade(server.url)
        values = {
            "AMPFLEET_DATABASE_URL": server.url,
            "AMPFLEET_BROKER_URL": "",
            "AMPFLEET_DATA_DIR": str(tmp_path / "var"),
            "AMPFLEET_ENVIRONMENT": "test",
            "AMPFLEET_SECRET_KEY": "test-secret-not-for-production",
            "AMPFLEET_NODE_TIMEOUT_S": str(NODE_TIMEOUT_S),
        }
        with environment(values):
            yield server


def _running_on(node: str) -> str:
    job_id = insert_job(state=JobState.RUNNING, attempt=1)
    with session_scope() as session:
        session.add(
            Allocation(
                job_id=job_id, attempt=1, node_id=node, node_rank=0, slots=2, launched_at=utcnow()
            )
        )
    return job_id


def _state(job_id: str) -> str:
    with session_scope() as session:
        job = session.get(Job, job_id)
        assert job is not None
        return job.state


def _beat(node: str) -> None:
    with session_scope() as session:
        session.execute(update(Node).where(Node.id == node).values(last_heartbeat_at=utcnow()))


def test_an_outage_longer_than_the_node_timeout_restarts_nothing(
    postgres: PrivatePostgres,
) -> None:
    add_node("healthy", slots=2, accelerator="cpu")
    add_node("silent", slots=2, accelerator="cpu")
    healthy, silent = _running_on("healthy"), _running_on("silent")
    scheduler = Scheduler()
    scheduler._safe_pass()
    assert scheduler.watched_since is None  # it has not lost the database yet

    postgres.stop()
    went_down = time.monotonic()
    scheduler._safe_pass()  # cannot read: the scheduler knows it was not watching
    # Down for more than the node timeout: no heartbeat can be written meanwhile.
    time.sleep(max(0.0, 2 * NODE_TIMEOUT_S - (time.monotonic() - went_down)))
    postgres.start()

    scheduler._safe_pass()
    assert scheduler.watched_since is not None
    with session_scope() as session:
        oldest = min(session.scalars(select(Node.last_heartbeat_at)))
    assert scheduler.watched_since - oldest > timedelta(seconds=NODE_TIMEOUT_S)
    # Both nodes' last heartbeats are older than the timeout, from before the outage.
    assert (_state(healthy), _state(silent)) == ("RUNNING", "RUNNING")

    # One node is heard from again, the other stays silent: a whole node timeout after the
    # database came back, the silent one is lost and its job restarts; the other runs on.
    for _ in range(200):  # a node timeout is 10 passes of 0.2 s; bounded at 40 s
        _beat("healthy")
        scheduler._safe_pass()
        if _state(silent) != "RUNNING":
            break
        time.sleep(0.2)
    assert (_state(healthy), _state(silent)) == ("RUNNING", "QUEUED")
    with session_scope() as session:
        lost = session.scalars(
            select(JobEvent).where(JobEvent.job_id == silent, JobEvent.reason == "node_lost")
        ).one()
    assert "node silent stopped heartbeating" in lost.message
    assert lost.time - scheduler.watched_since >= timedelta(seconds=NODE_TIMEOUT_S)
