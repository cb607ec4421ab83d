"""The scheduler at fleet scale, each figure beside its baseline in the same run.

    python -m bench.scheduler                   # all three parts
    python -m bench.scheduler --skip-latency    # no fleet processes

1. In memory: our placement engine against a naive first-fit scan (every node, every job) on
   the same 10,000 queued jobs (gangs of 1-8 GPUs, 3 priorities, 20 projects) and 1,000
   nodes x 8 GPUs: placements/s and GPUs allocated against the ideal packing.
2. In PostgreSQL: whole passes (read the queue and fleet, decide, write states, events,
   allocations, start messages and every waiting job's explanation, commit) until the queue
   is drained, with placed jobs finished between passes; our bulk writes against writing
   each placement row by row (fenced UPDATE, event, allocations, outbox per job).
3. Submit -> node launching the ranks (STARTING), on an idle local fleet of real processes:
   p50 and p99 over sequential submissions, PostgreSQL + Redis and the embedded default.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import insert, update
from sqlalchemy.orm import Session

from ampfleet.api.observability import nearest_rank
from ampfleet.core.celery_config import START_ATTEMPT
from ampfleet.core.db import session_scope
from ampfleet.core.fleet import JobRequest, NodeView, matches
from ampfleet.core.lifecycle import transition
from ampfleet.core.messaging import enqueue
from ampfleet.core.models import Allocation, Job, Node, utcnow
from ampfleet.core.settings import get_settings
from ampfleet.core.states import JobState
from ampfleet.scheduler import snapshot
from ampfleet.scheduler.apply import apply
from ampfleet.scheduler.placement import Decision, schedule
from bench.scheduler_memory import make_scenario

# -- 1. in memory -------------------------------------------------------------------------


def first_fit(jobs: Sequence[JobRequest], nodes: Sequence[NodeView]) -> list[tuple[str, int]]:
    """The baseline: priority then FIFO, each job scans every node in order."""
    free = {n.id: n.free for n in nodes}
    placed = []
    for job in sorted(jobs, key=lambda j: (-j.priority, j.id)):
        per_node = job.procs_per_node or job.total_procs or 1
        wanted = job.nodes or 1
        chosen = [n.id for n in nodes if matches(job, n) and free[n.id] >= per_node][:wanted]
        if len(chosen) == wanted:
            for node_id in chosen:
                free[node_id] -= per_node
            placed.append((job.id, per_node * wanted))
    return placed


def in_memory(runs: int) -> None:
    queue, fleet = make_scenario()
    ideal = min(sum(j.slots for j in queue), sum(n.slots for n in fleet))
    ours_s, base_s = [], []
    for _ in range(runs):
        started = time.perf_counter()
        decision = schedule(queue, fleet, [], {}, {}, now=0.0)
        ours_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        baseline = first_fit(queue, fleet)
        base_s.append(time.perf_counter() - started)
    ours_slots = sum(s for p in decision.placements for _, s in p.allocations)
    base_slots = sum(s for _, s in baseline)
    ours_rate = len(decision.placements) / statistics.median(ours_s)
    base_rate = len(baseline) / statistics.median(base_s)
    print(f"1. in memory: {len(queue)} jobs, {len(fleet)} nodes x 8 GPUs, median of {runs}")
    print(f"   {'':12} {'placements':>10} {'per second':>11} {'packing':>8}")
    print(
        f"   {'ours':12} {len(decision.placements):>10} {ours_rate:>11,.0f} "
        f"{ours_slots / ideal:>8.1%}"
    )
    print(f"   {'first fit':12} {len(baseline):>10} {base_rate:>11,.0f} {base_slots / ideal:>8.1%}")
    print(f"   ours / baseline: {ours_rate / base_rate:.1f}x placements/s")


# -- 2. in PostgreSQL ---------------------------------------------------------------------


def seed(jobs: Sequence[JobRequest], nodes: Sequence[NodeView]) -> None:
    now = utcnow()
    with session_scope() as session:
        session.execute(
            insert(Node),
            [
                {
                    "id": n.id,
                    "queue": f"node.{n.id}",
                    "address": "10.0.0.1",
                    "accelerator": "cuda",
                    "slots": n.slots,
                    "gpu_model": n.gpu_model,
                    "gpu_memory_mb": n.gpu_memory_mb,
                    "labels": dict(n.labels),
                    "state": "ready",
                    "registered_at": now,
                    "last_heartbeat_at": now,
                }
                for n in nodes
            ],
        )
        session.execute(insert(Job), [_job_row(j, now) for j in jobs])


def _job_row(job: JobRequest, now: datetime) -> dict[str, Any]:
    resources = {
        "nodes": job.nodes,
        "procs_per_node": job.procs_per_node,
        "procs": job.total_procs,
        "accelerator": job.accelerator,
        "gpu_type": job.gpu_type,
        "min_gpu_memory_mb": job.min_gpu_memory_mb,
        "selector": dict(job.selector),
    }
    resolved = {
        "project": job.project,
        "recipe": "gpt-bench",
        "resources": resources,
        "priority": ["low", "normal", "high"][job.priority],
        "stop": {"max_steps": 100, "max_runtime_s": None},
        "retry": {"max_restarts": 2},
    }
    return {
        "id": job.id.replace("job-", "job_"),
        "project": job.project,
        "recipe": "gpt-bench",
        "spec": resolved,
        "resolved": resolved,
        "state": "QUEUED",
        "priority": job.priority,
        "attempt": 0,
        "gang_size": job.slots,
        "step": 0,
        "latest_metrics": {},
        "created_at": now,
        "updated_at": now,
        "metric_points": 0,
        "metric_points_dropped": 0,
        "log_bytes": 0,
        "log_lines_dropped": 0,
    }


def apply_row_by_row(session: Session, world: snapshot.Snapshot, decision: Decision) -> int:
    """The baseline: what a straightforward implementation writes, one placement at a time."""
    placed = 0
    for placement in decision.placements:
        attempt = world.queued[placement.job_id].attempt
        if not transition(
            session,
            placement.job_id,
            JobState.SCHEDULED,
            from_states={JobState.QUEUED},
            attempt=attempt,
            new_attempt=attempt + 1,
            reason="placed",
            message="",
            scheduled_at=world.now,
        ):
            continue
        for rank, (node_id, slots) in enumerate(placement.allocations):
            session.add(
                Allocation(
                    job_id=placement.job_id,
                    attempt=attempt + 1,
                    node_id=node_id,
                    node_rank=rank,
                    slots=slots,
                )
            )
            enqueue(
                session,
                queue=world.node_queues[node_id],
                task=START_ATTEMPT,
                job_id=placement.job_id,
                attempt=attempt + 1,
                node_rank=rank,
            )
        session.flush()
        placed += 1
    return placed


def drain(writer: Callable[[Session, snapshot.Snapshot, Decision], int]) -> tuple[int, float]:
    """Passes until the queue is empty; returns (placements, seconds inside passes)."""
    settings = get_settings()
    total, seconds = 0, 0.0
    while True:
        started = time.perf_counter()
        with session_scope() as session:
            now = utcnow()
            world = snapshot.load(session, settings, now)
            decision = world.decide()
            placed = writer(session, world, decision)
        seconds += time.perf_counter() - started
        total += placed
        if not placed:
            return total, seconds
        with session_scope() as session:  # the placed jobs finish (not timed)
            session.execute(
                update(Job)
                .where(Job.state == "SCHEDULED")
                .values(state="SUCCEEDED", finished_at=utcnow())
            )
            session.execute(
                update(Allocation)
                .where(Allocation.released_at.is_(None))
                .values(released_at=utcnow())
            )


def in_postgres() -> None:
    from tests.support.env import environment, fresh_postgres_database
    from tests.support.services import services

    queue, fleet = make_scenario()
    results = {}
    for name, writer in (("ours (bulk)", apply), ("row by row", apply_row_by_row)):
        with (
            fresh_postgres_database("ampfleet_bench") as url,
            environment(
                {"AMPFLEET_DATABASE_URL": url, "AMPFLEET_BROKER_URL": services().redis_url(13)}
            ),
        ):
            seed(queue, fleet)
            results[name] = drain(writer)
    print(f"2. PostgreSQL: {len(queue)} jobs onto {len(fleet)} nodes x 8 GPUs, whole passes")
    for name, (placed, seconds) in results.items():
        print(
            f"   {name:12} {placed:>6} placements in {seconds:6.2f} s = "
            f"{placed / seconds:>7,.0f} placements/s"
        )
    ours, base = (p / s for p, s in results.values())
    print(f"   ours / baseline: {ours / base:.1f}x")


# -- 3. submit -> STARTING latency --------------------------------------------------------


def latency(samples: int) -> None:
    from tests.support.factories import job_spec
    from tests.support.fleet import running_fleet

    print(f"3. submit -> ranks launching (STARTING) on an idle local fleet, {samples} jobs each")
    for backend in ("postgres+redis", "embedded"):
        with tempfile.TemporaryDirectory() as tmp, running_fleet(Path(tmp), backend) as fleet:
            waits, to_running = [], []
            for _ in range(samples):
                started = time.time()
                job = fleet.submit(job_spec(stop={"max_steps": 5}))
                fleet.wait_for_state(job["id"], {"SUCCEEDED"}, timeout=120)
                times = {e["to_state"]: e["time"] for e in fleet.events(job["id"])}
                stamp = datetime.fromisoformat
                waits.append(stamp(times["STARTING"]).timestamp() - started)
                to_running.append(stamp(times["RUNNING"]).timestamp() - started)
            waits.sort()
            p99 = nearest_rank(waits, 0.99)
            print(
                f"   {backend:15} p50 {statistics.median(waits) * 1000:6.0f} ms   "
                f"p99 {p99 * 1000:6.0f} ms   (to RUNNING, ranks initialised: p50 "
                f"{statistics.median(to_running):.1f} s)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--skip-latency", action="store_true")
    args = parser.parse_args()
    in_memory(args.runs)
    in_postgres()
    if not args.skip_latency:
        latency(args.samples)


if __name__ == "__main__":
    main()
