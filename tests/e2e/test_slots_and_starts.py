"""With real processes: a slot comes back only once the rank on it has exited, a node takes
other start messages while a job waits for its rendezvous, and a start message that meets
a database briefly away is retried, not dropped."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from ampfleet.core.models import Allocation, Node, OutboxMessage, utcnow
from ampfleet.core.states import JobState
from tests.support.env import environment
from tests.support.factories import insert_job, job_spec
from tests.support.fleet import Fleet, rank_processes
from tests.support.private_services import private_postgres

pytestmark = pytest.mark.e2e
ONE_RANK = {"nodes": 1, "procs_per_node": 1}


def fleet_environment(fleet: Fleet) -> Any:
    """This test process's settings, engine and Celery app pointed at the fleet's."""
    return environment({k: v for k, v in fleet.env.items() if k.startswith("AMPFLEET_")})


def training_ranks(job_id: str) -> list[int]:
    ranks = []
    for pid in rank_processes(job_id):
        try:
            if b"training.entry" in Path(f"/proc/{pid}/cmdline").read_bytes():
                ranks.append(pid)
        except OSError:
            continue
    return ranks


def used_slots(fleet: Fleet, node: str = "node-a") -> int:
    nodes = {n["id"]: n for n in fleet.http.get("/v1/nodes").json()["items"]}
    return int(nodes[node]["used_slots"])


def event_time(fleet: Fleet, job_id: str, to_state: str) -> str:
    return str(next(e["time"] for e in fleet.events(job_id) if e["to_state"] == to_state))


@pytest.mark.slow  # long tier (make test-all): a fault, limit or load scenario
def test_a_cancelled_preempted_job_keeps_its_slot_until_its_rank_exits(make_fleet) -> None:
    fleet = make_fleet(cpu_slots=1)
    low = fleet.submit(job_spec(resources=ONE_RANK, stop={"max_steps": 1_000_000}, priority="low"))
    fleet.wait_until(
        lambda: fleet.job(low["id"])["progress"]["step"] >= 20, timeout=120, what="low running"
    )
    ranks = training_ranks(low["id"])
    assert ranks
    # A slow preemption checkpoint: the stopped rank holds the preemption signal until resumed.
    for pid in ranks:
        os.kill(pid, signal.SIGSTOP)
    try:
        high = fleet.submit(job_spec(resources=ONE_RANK, stop={"max_steps": 20}, priority="high"))
        fleet.wait_for_state(low["id"], {"PREEMPTED"}, timeout=60)
        cancelled = fleet.http.post(f"/v1/jobs/{low['id']}/cancel")
        assert cancelled.status_code in (200, 202), cancelled.text
        assert cancelled.json()["state"] == "CANCELLING"
        # Several scheduler passes (one a second) while the rank is still there.
        for _ in range(4):
            time.sleep(1.0)
            assert used_slots(fleet) == 1
            assert fleet.job(high["id"])["state"] == "QUEUED"
            assert fleet.job(low["id"])["state"] == "CANCELLING"
        assert all(Path(f"/proc/{pid}").exists() for pid in ranks)
    finally:
        for pid in ranks:
            os.kill(pid, signal.SIGCONT)
    fleet.wait_for_state(low["id"], {"CANCELLED"}, timeout=120)
    fleet.wait_for_state(high["id"], {"SUCCEEDED"}, timeout=120)
    assert event_time(fleet, low["id"], "CANCELLED") <= event_time(fleet, high["id"], "SCHEDULED")
    assert not any(Path(f"/proc/{pid}").exists() for pid in ranks)


@pytest.mark.slow  # minutes of fleet time: the long tier
def test_a_node_takes_other_starts_while_jobs_wait_for_their_rendezvous(make_fleet) -> None:
    fleet = make_fleet(cpu_slots=5)
    waiting = []
    with fleet_environment(fleet):
        from ampfleet.core.celery_config import START_ATTEMPT
        from ampfleet.core.db import session_scope

        with session_scope() as session:
            node_a = session.get(Node, "node-a")
            assert node_a is not None
            # A first node that never starts its share, so the followers on node-a wait;
            # cordoned and full, it takes nothing else, and it looks alive throughout.
            session.add(
                Node(
                    id="node-ghost",
                    queue="node.node-ghost",
                    address="127.0.0.1",
                    accelerator="cpu",
                    slots=4,
                    state="cordoned",
                    last_heartbeat_at=utcnow().replace(year=utcnow().year + 1),
                )
            )
        for _ in range(4):  # as many as the worker has Celery threads
            job_id = insert_job(state=JobState.SCHEDULED, attempt=1, procs_per_node=1)
            waiting.append(job_id)
            with session_scope() as session:
                for rank, node in enumerate(("node-ghost", "node-a")):
                    session.add(
                        Allocation(job_id=job_id, attempt=1, node_id=node, node_rank=rank, slots=1)
                    )
                session.add(
                    OutboxMessage(
                        queue=node_a.queue,
                        task=START_ATTEMPT,
                        kwargs={"job_id": job_id, "attempt": 1, "node_rank": 1},
                        send_attempts=0,
                    )
                )
    fleet.wait_until(
        lambda: all(fleet.job(j)["state"] == "STARTING" for j in waiting),
        timeout=60,
        what="node-a claiming every follower share",
    )
    other = fleet.submit(job_spec(resources=ONE_RANK, stop={"max_steps": 20}))
    fleet.wait_for_state(other["id"], {"SUCCEEDED"}, timeout=120)
    for job_id in waiting:  # still waiting: their rendezvous wait has not run out
        assert fleet.job(job_id)["state"] == "STARTING"
        assert not any(e["reason"] == "rendezvous_timeout" for e in fleet.events(job_id))


@pytest.mark.slow  # minutes of fleet time: the long tier
def test_a_start_message_meeting_a_database_outage_is_retried(make_fleet) -> None:
    with private_postgres() as postgres:
        # A start timeout far away: only a retried message can start the job in time.
        fleet = make_fleet(database_url=postgres.url, extra_env={"AMPFLEET_START_TIMEOUT_S": "900"})
        with fleet_environment(fleet):
            from ampfleet.core.celery_config import START_ATTEMPT
            from ampfleet.core.db import session_scope
            from ampfleet.core.messaging import get_celery

            job_id = insert_job(state=JobState.SCHEDULED, attempt=1, procs_per_node=1)
            with session_scope() as session:
                session.add(
                    Allocation(job_id=job_id, attempt=1, node_id="node-a", node_rank=0, slots=1)
                )
                queue = session.scalar(select(Node.queue).where(Node.id == "node-a"))
            postgres.stop()
            get_celery().send_task(
                START_ATTEMPT,
                queue=queue,
                kwargs={"job_id": job_id, "attempt": 1, "node_rank": 0},
            )
        worker_log = fleet.root / "worker-node-a.log"
        fleet.wait_until(
            lambda: "database unavailable" in worker_log.read_text(errors="replace"),
            timeout=60,
            what="the claim meeting the outage",
        )
        postgres.start()
        done = fleet.wait_for_state(job_id, {"SUCCEEDED"}, timeout=180)
        assert done["attempt"] == 1
        assert not any(e["reason"] == "start_timeout" for e in fleet.events(job_id))
