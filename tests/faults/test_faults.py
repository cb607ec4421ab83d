"""Faults with real processes, PostgreSQL and Redis: parts die, and still nothing accepted
is lost, nothing runs twice, and every job ends in the right state. (Long tier.)"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, func, select

from ampfleet.core.models import Allocation, JobEvent, OutboxMessage
from ampfleet.workers.heartbeat import PHASES
from ampfleet.workers.process_title import rank_of_title
from tests.faults.reported import count_reported
from tests.support.env import environment
from tests.support.factories import job_spec
from tests.support.fleet import Fleet, placed_on, rank_processes, transitions
from tests.support.private_services import private_postgres, private_redis

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def count(fleet: Fleet, query) -> int:
    engine = create_engine(fleet.env["AMPFLEET_DATABASE_URL"])
    try:
        with engine.connect() as conn:
            return int(conn.scalar(query) or 0)
    finally:
        engine.dispose()


def test_worker_killed_mid_training_requeues_and_finishes_from_checkpoint(make_fleet) -> None:
    fleet = make_fleet(nodes=("node-a", "node-b"), extra_env={"AMPFLEET_NODE_TIMEOUT_S": "4"})
    job = fleet.submit(
        job_spec(stop={"max_steps": 3000}, checkpoint={"every_steps": 100}, log_every_steps=50)
    )
    fleet.wait_until(
        lambda: fleet.job(job["id"])["progress"]["step"] >= 300,
        timeout=120,
        what="training past a checkpoint",
    )
    [victim] = placed_on(fleet, job["id"], 1)
    fleet.kill(f"worker-{victim}", signal.SIGKILL)
    # Its ranks die with it (parent-death signal): never two attempts at once.
    fleet.wait_until(lambda: rank_processes(job["id"]) == [], timeout=30, what="ranks gone")
    done = fleet.wait_for_state(job["id"], {"SUCCEEDED"}, timeout=240)
    assert done["attempt"] == 2
    assert placed_on(fleet, job["id"], 2) != [victim]
    history = transitions(fleet, job["id"])
    assert ("RUNNING", "RESTARTING", "node_lost") in history
    resumed = [e for e in fleet.events(job["id"]) if e["to_state"] == "RUNNING"][-1]
    assert int(re.search(r"resumed at step (\d+)", resumed["message"]).group(1)) >= 300
    # What the dead agent never stored is adopted from its folder; what came after the
    # checkpoint is reported again by the resumed attempt, and stored once.
    reported = count_reported(fleet.env["AMPFLEET_DATABASE_URL"], [job["id"]])
    print(f"\nworker SIGKILL: {reported.summary()}; {fleet.tally()}")
    reported.assert_complete()
    # Goodput: the dead node's rows (released only by its next worker) count until the
    # restart was placed; the kinds still add up to what was held.
    goodput = fleet.job(job["id"])["goodput"]
    kinds = ("training", "startup", "recomputed", "checkpoint", "evaluation", "other")
    assert goodput["attempts"] == 2
    assert goodput["training_slot_s"] > 0
    assert goodput["other_slot_s"] > 0  # the killed attempt's tail, after its last report
    assert sum(goodput[f"{kind}_slot_s"] for kind in kinds) == pytest.approx(
        goodput["allocated_slot_s"], abs=0.01
    )
    print(f"goodput: {goodput}")


def test_redis_down_for_30s_loses_nothing(make_fleet, tmp_path: Path) -> None:
    with private_redis(tmp_path) as redis:
        fleet = make_fleet(broker_url=redis.url)
        first = fleet.submit(job_spec(stop={"max_steps": 100}))
        redis.stop()
        outage_started = time.monotonic()
        during = []
        for _ in range(3):
            started = time.monotonic()
            during.append(fleet.submit(job_spec(stop={"max_steps": 50})))
            assert time.monotonic() - started < 5  # submitting does not wait on the broker
        ready = fleet.http.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["error"]["details"][0]["field"] == "broker"
        time.sleep(max(0.0, 30 - (time.monotonic() - outage_started)))
        redis.start()
        for job in [first, *during]:
            fleet.wait_for_state(job["id"], {"SUCCEEDED"}, timeout=240)
        assert fleet.http.get("/readyz").status_code == 200
        assert len(fleet.http.get("/v1/jobs").json()["items"]) == 4
        ids = [job["id"] for job in [first, *during]]
        reported = count_reported(fleet.env["AMPFLEET_DATABASE_URL"], ids)
        print(f"\nRedis down 30 s: {reported.summary()}; {fleet.tally()}")
        reported.assert_complete()


def test_postgres_restart_answers_503_then_recovers(make_fleet) -> None:
    with private_postgres() as postgres:
        fleet = make_fleet(database_url=postgres.url)
        job = fleet.submit(
            job_spec(stop={"max_steps": 3000}, checkpoint={"every_steps": 200}, log_every_steps=10)
        )
        fleet.wait_for_state(job["id"], {"RUNNING"})
        postgres.stop()
        stopped_at = time.monotonic()
        codes = set()
        for path in (f"/v1/jobs/{job['id']}", "/v1/jobs", "/readyz"):
            response = fleet.http.get(path)
            codes.add(response.status_code)
            assert response.json()["error"]["code"] == "service_unavailable", response.text
            assert response.headers["Retry-After"]
        posted = fleet.http.post("/v1/jobs", json=job_spec())
        assert posted.status_code == 503
        assert codes == {503}
        assert fleet.http.get("/healthz").status_code == 200  # alive: nothing to restart
        # Long enough for the ranks to report many steps that the node agent cannot store.
        time.sleep(max(0.0, 20 - (time.monotonic() - stopped_at)))
        postgres.start()
        fleet.wait_until(
            lambda: fleet.http.get("/readyz").status_code == 200, timeout=60, what="the API back"
        )
        fleet.wait_for_state(job["id"], {"SUCCEEDED"}, timeout=300)
        reported = count_reported(postgres.url, [job["id"]])
        print(f"\nPostgreSQL down 20 s: {reported.summary()}; {fleet.tally()}")
        reported.assert_complete()


def test_a_postgres_outage_longer_than_the_node_timeout_restarts_no_job(make_fleet) -> None:
    """Nodes cannot heartbeat while the database is down; the scheduler cannot read either,
    and gives every node a whole node timeout from the database's return (heartbeats every
    3 s, so the scheduler's 1 s passes see the stale heartbeats first): the job runs on."""
    with private_postgres() as postgres:
        fleet = make_fleet(
            database_url=postgres.url,
            extra_env={"AMPFLEET_HEARTBEAT_INTERVAL_S": "3", "AMPFLEET_NODE_TIMEOUT_S": "9"},
        )
        job = fleet.submit(
            job_spec(stop={"max_steps": 3000}, checkpoint={"every_steps": 200}, log_every_steps=10)
        )
        fleet.wait_for_state(job["id"], {"RUNNING"})
        postgres.stop()
        stopped_at = time.monotonic()
        # Nearly three node timeouts without a heartbeat.
        time.sleep(max(0.0, 25 - (time.monotonic() - stopped_at)))
        postgres.start()
        done = fleet.wait_for_state(job["id"], {"SUCCEEDED"}, timeout=300)
        history = transitions(fleet, job["id"])
        assert done["attempt"] == 1, history
        assert not any(reason == "node_lost" for _, _, reason in history), history
        reported = count_reported(postgres.url, [job["id"]])
        print(f"\nPostgreSQL down 25 s, node timeout 9 s: {reported.summary()}; {fleet.tally()}")
        reported.assert_complete()


def test_committed_messages_go_out_after_a_crash_before_sending(make_fleet) -> None:
    fleet = make_fleet()
    fleet.kill("scheduler", signal.SIGKILL)
    job = fleet.submit(job_spec(stop={"max_steps": 30}))  # its wake-up reaches nobody
    # A scheduler that dies right after committing its placement, before relaying it:
    with environment({k: v for k, v in fleet.env.items() if k.startswith("AMPFLEET_")}):
        from ampfleet.core.db import session_scope
        from ampfleet.core.models import utcnow
        from ampfleet.core.settings import get_settings
        from ampfleet.scheduler import snapshot
        from ampfleet.scheduler.apply import apply

        with session_scope() as session:
            now = utcnow()
            world = snapshot.load(session, get_settings(), now)
            decision = world.decide()
            assert apply(session, world, decision) == 1
    assert fleet.job(job["id"])["state"] == "SCHEDULED"
    unsent = select(func.count()).select_from(OutboxMessage).where(OutboxMessage.sent_at.is_(None))
    assert count(fleet, unsent) == 1
    fleet.start_scheduler("scheduler-restarted")
    fleet.wait_for_state(job["id"], {"SUCCEEDED"}, timeout=120)
    assert count(fleet, unsent) == 0


def test_a_redelivered_start_message_runs_once(make_fleet) -> None:
    fleet = make_fleet(extra_env={"AMPFLEET_BROKER_VISIBILITY_TIMEOUT_S": "2"})
    job = fleet.submit(job_spec(stop={"max_steps": 1500}, log_every_steps=100))
    fleet.wait_for_state(job["id"], {"STARTING", "RUNNING"})
    with environment({k: v for k, v in fleet.env.items() if k.startswith("AMPFLEET_")}):
        from ampfleet.core.celery_config import START_ATTEMPT
        from ampfleet.core.messaging import get_celery

        for _ in range(3):  # as a broker would after a visibility timeout
            get_celery().send_task(
                START_ATTEMPT,
                queue="node.node-a",
                kwargs={"job_id": job["id"], "attempt": 1, "node_rank": 0},
            )
    done = fleet.wait_for_state(job["id"], {"SUCCEEDED"}, timeout=180)
    assert done["attempt"] == 1
    launches = [e for e in fleet.events(job["id"]) if e["to_state"] == "STARTING"]
    assert len(launches) == 1
    logs = fleet.http.get(f"/v1/jobs/{job['id']}/logs", params={"rank": 0}).json()["items"]
    assert sum("rank 0/2 on" in line["line"] for line in logs) == 1  # one launch, one run


def _rank_pid(job_id: str, rank: int) -> int:
    for pid in rank_processes(job_id):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            title = Path(f"/proc/{pid}/cmdline").read_text().split()
        except OSError:
            continue
        if f"RANK={rank}".encode() in environ and b"LOCAL_WORLD_SIZE=2" in environ:
            return pid
        if rank_of_title(title) == rank:  # forked from a warm launcher: its title says
            return pid
    raise AssertionError(f"rank {rank} of {job_id} not found")


def test_a_hung_rank_is_named_its_stacks_logged_and_its_node_cordoned(make_fleet) -> None:
    """One rank stops (SIGSTOP) mid-step: the node sees no rank move on for the job's hang
    timeout, names the rank that stopped first, dumps the stacks of those that can, requeues
    the job and (cordon after 1 hang here) cordons the node; uncordoned, the job resumes from
    its checkpoint and SUCCEEDS."""
    fleet = make_fleet(extra_env={"AMPFLEET_CORDON_AFTER_HANGS": "1"})
    job = fleet.submit(
        job_spec(
            stop={"max_steps": 2000},
            checkpoint={"every_steps": 200},
            log_every_steps=20,
            retry={"max_restarts": 1},
            monitoring={"hang_timeout_s": 10},
        )
    )
    fleet.wait_until(
        lambda: fleet.job(job["id"])["progress"]["step"] >= 100, timeout=120, what="training"
    )
    subprocess.run(["kill", "-STOP", str(_rank_pid(job["id"], 1))], check=True)
    fleet.wait_until(
        lambda: any(e["reason"] == "node_cordoned" for e in fleet.events(job["id"])),
        timeout=120,
        what="the hang to be detected and the node cordoned",
    )
    events = fleet.events(job["id"])
    hung = next(e for e in events if e["reason"] == "hung")
    assert "no rank on node node-a moved on for 10s (the hang timeout)" in hung["message"]
    # Both ranks named, the one furthest behind first (the ordering itself: test_heartbeat).
    named = re.findall(r"rank (\d) last entered (\w+) at step (\d+)", hung["message"])
    assert sorted(rank for rank, _, _ in named) == ["0", "1"]
    (_, first_phase, first_step), (_, then_phase, then_step) = named
    assert int(first_step) <= int(then_step)
    if first_step == then_step:
        assert PHASES.index(first_phase) <= PHASES.index(then_phase)
    [node] = fleet.http.get("/v1/nodes").json()["items"]
    assert node["state"] == "cordoned"
    assert node["state_reason"].startswith("cordoned automatically: 1 attempts hung on it")
    assert fleet.job(job["id"])["state"] == "QUEUED"  # the only node takes nothing new

    logs = fleet.http.get(f"/v1/jobs/{job['id']}/logs", params={"rank": 0, "limit": 1000})
    assert any("most recent call first" in item["line"] for item in logs.json()["items"])

    assert fleet.http.post("/v1/nodes/node-a/uncordon").json()["state_reason"] is None
    done = fleet.wait_for_state(job["id"], {"SUCCEEDED"}, timeout=240)
    assert done["attempt"] == 2


def test_a_killed_scheduler_is_replaced_without_double_placement(make_fleet) -> None:
    fleet = make_fleet(start_schedulers=2)
    fleet.kill("scheduler", signal.SIGKILL)
    jobs = [fleet.submit(job_spec(stop={"max_steps": 30})) for _ in range(3)]
    for job in jobs:
        fleet.wait_for_state(job["id"], {"SUCCEEDED"}, timeout=180)
    per_attempt = select(func.count()).select_from(
        select(Allocation.job_id, Allocation.attempt)
        .group_by(Allocation.job_id, Allocation.attempt)
        .having(func.count() > 1)
        .subquery()
    )
    assert count(fleet, per_attempt) == 0
    placements = select(func.count()).where(JobEvent.to_state == "SCHEDULED")
    assert count(fleet, placements) == 3


CHECKPOINT_WRITER = """
import sys, torch, torch.distributed as dist
from pathlib import Path
from ampfleet.workers.training import checkpoint
directory = Path(sys.argv[1])
dist.init_process_group("gloo", init_method=f"file://{directory}.init", rank=0, world_size=1)
manager = checkpoint.CheckpointManager(directory, rank=0, keep_last=5)
manager.save(1, {"weights": torch.ones(4)}, {})
manager.wait()
print("first", flush=True)
manager.save(2, {"weights": torch.zeros(150_000_000)}, {})
manager.wait()
print("second", flush=True)
"""


def test_a_crash_while_writing_a_checkpoint_keeps_the_previous_one(tmp_path: Path) -> None:
    import torch

    from ampfleet.workers.training import checkpoint

    writer = subprocess.Popen(
        [sys.executable, "-c", CHECKPOINT_WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    assert writer.stdout is not None
    assert writer.stdout.readline().strip() == "first"
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob(".ckpt-000000002.partial/*.distcp")):
        assert time.monotonic() < deadline, "the second checkpoint was never being written"
        time.sleep(0.005)
    writer.kill()  # mid-write of the second checkpoint
    writer.wait()
    assert checkpoint.steps_available(tmp_path) == [1]
    latest = checkpoint.latest(tmp_path)
    assert latest is not None
    assert checkpoint.read_meta(latest)["step"] == 1
    state = {"weights": torch.empty(4)}
    checkpoint.load(latest, state)  # DCP without a process group: one reader
    assert state["weights"].tolist() == [1.0] * 4
