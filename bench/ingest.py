"""Metric ingest into PostgreSQL: ampfleet's node-agent path against MLflow's tracking
server (REST `runs/log-batch`) on the same PostgreSQL server, side by side in one run; and
reading a 1,000,000-point series back, downsampled, against fetching it raw.

    python -m bench.ingest [--points 200000] [--batch 1000]

MLflow runs from its own virtualenv (`.venv-bench`, not a dependency of ampfleet):
    python3 -m venv .venv-bench && .venv-bench/bin/pip install mlflow psycopg2-binary

Our path is what the node agent does with rank 0's records: one transaction per batch,
COPY into `metrics`, the job's latest values and counters updated. MLflow's path is its
REST API, `--batch` metrics per request (its own limit is 1,000), one client.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from fastapi.testclient import TestClient
from sqlalchemy import func, select, text

from ampfleet.core.db import session_scope
from ampfleet.core.keys import Role, create_key
from ampfleet.core.models import Job, Metric
from ampfleet.core.settings import get_settings
from ampfleet.workers.ingest import AttemptFeed, apply_records
from ampfleet.workers.rundir import RunDir
from tests.support.env import environment, fresh_postgres_database
from tests.support.factories import job_spec
from tests.support.fleet import free_port

NAMES = (
    "loss",
    "learning_rate",
    "grad_norm",
    "step_time_s",
    "samples_per_s",
    "time_forward_s",
    "time_backward_s",
    "time_optimizer_s",
    "allreduce_bytes",
    "val_loss",
)


def batches(points: int, batch: int) -> list[list[dict[str, object]]]:
    """Records as rank 0 writes them: one per step, one value per metric name."""
    per_record = len(NAMES)
    steps = points // per_record
    records = [
        {"kind": "metrics", "step": s, "values": {n: math.sin(s + i) for i, n in enumerate(NAMES)}}
        for s in range(steps)
    ]
    per_batch = max(1, batch // per_record)
    return [records[i : i + per_batch] for i in range(0, len(records), per_batch)]


def _api_with_a_job() -> tuple[TestClient, str]:
    """An in-process API client with an admin key, and a job to attach metrics to."""
    from ampfleet.api.app import create_app

    with session_scope() as session:
        _, key = create_key(
            session,
            project="default",
            role=Role.ADMIN,
            name="bench",
            pepper=get_settings().secret_key,
        )
    api = TestClient(create_app(), headers={"Authorization": f"Bearer {key}"})
    return api, api.post("/v1/jobs", json=job_spec()).json()["id"]


def ours(points: int, batch: int, database_url: str) -> float:
    with (
        environment(
            {
                "AMPFLEET_DATABASE_URL": database_url,
                "AMPFLEET_MAX_METRIC_POINTS_PER_JOB": str(points * 2),
            }
        ),
        tempfile.TemporaryDirectory() as tmp,
    ):
        _, job_id = _api_with_a_job()
        feed = AttemptFeed(RunDir(Path(tmp)))
        work = batches(points, batch)
        started = time.perf_counter()
        for records in work:
            with session_scope() as session:
                job = session.get(Job, job_id)
                assert job is not None
                apply_records(session, job, 1, records, feed, get_settings())
        seconds = time.perf_counter() - started
        with session_scope() as session:
            stored = session.scalar(select(func.count()).where(Metric.job_id == job_id))
        return (stored or 0) / seconds


def mlflow(points: int, batch: int, database_url: str) -> float:
    python = Path(".venv-bench/bin/python")
    if not python.exists():
        raise SystemExit("MLflow is not installed: see the module docstring")
    port = free_port()
    store = database_url.replace("postgresql+psycopg://", "postgresql+psycopg2://")
    with tempfile.TemporaryDirectory() as artifacts:
        server = subprocess.Popen(
            [
                str(python),
                "-m",
                "mlflow",
                "server",
                "--backend-store-uri",
                store,
                "--default-artifact-root",
                artifacts,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--workers",
                "1",
            ],
            stdout=(Path(artifacts) / "server.log").open("wb"),
            stderr=subprocess.STDOUT,
            env={**os.environ},
        )
        base = f"http://127.0.0.1:{port}/api/2.0/mlflow"
        try:
            with httpx.Client(timeout=60) as client:
                for _ in range(600):
                    try:
                        if client.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    time.sleep(0.2)
                experiment = client.post(
                    f"{base}/experiments/create", json={"name": f"bench-{time.time()}"}
                ).json()
                run = client.post(
                    f"{base}/runs/create",
                    json={
                        "experiment_id": experiment["experiment_id"],
                        "start_time": 0,
                    },
                ).json()["run"]["info"]["run_id"]
                work = batches(points, batch)
                now = int(time.time() * 1000)
                started = time.perf_counter()
                for records in work:
                    metrics = [
                        {"key": n, "value": v, "timestamp": now, "step": r["step"]}
                        for r in records
                        for n, v in r["values"].items()
                    ]
                    response = client.post(
                        f"{base}/runs/log-batch", json={"run_id": run, "metrics": metrics}
                    )
                    response.raise_for_status()
                seconds = time.perf_counter() - started
        except httpx.HTTPError:
            print((Path(artifacts) / "server.log").read_text()[-3000:], file=sys.stderr)
            raise
        finally:
            server.terminate()
            server.wait(timeout=30)
    return sum(len(r) * len(NAMES) for r in work) / seconds


def query_million(database_url: str, runs: int) -> None:
    with environment(
        {"AMPFLEET_DATABASE_URL": database_url, "AMPFLEET_MAX_METRIC_POINTS_PER_JOB": "2000000"}
    ):
        api, job_id = _api_with_a_job()
        with session_scope() as session:
            session.execute(
                text(
                    "INSERT INTO metrics (job_id, attempt, step, name, value, time) "
                    "SELECT :job, 1, s, 'loss', sin(s / 1000.0), now() "
                    "FROM generate_series(1, 1000000) AS s"
                ),
                {"job": job_id},
            )
        downsampled, raw = [], []
        for _ in range(runs):
            started = time.perf_counter()
            body = api.get(
                f"/v1/jobs/{job_id}/metrics", params={"names": "loss", "max_points": 1000}
            ).json()
            downsampled.append(time.perf_counter() - started)
            assert len(body["series"][0]["points"]) <= 1000
            started = time.perf_counter()
            with session_scope() as session:
                rows = session.execute(
                    select(Metric.step, Metric.value)
                    .where(Metric.job_id == job_id)
                    .order_by(Metric.step)
                ).all()
            raw.append(time.perf_counter() - started)
            assert len(rows) == 1_000_000
    ours_s, raw_s = statistics.median(downsampled), statistics.median(raw)
    print(
        f"1,000,000-point series: GET metrics?max_points=1000 {ours_s * 1000:.0f} ms "
        f"({len(body['series'][0]['points'])} points, min/max/mean per bucket) vs fetching "
        f"every row {raw_s * 1000:.0f} ms: {raw_s / ours_s:.1f}x faster, median of {runs}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    rates: dict[str, list[float]] = {"ampfleet": [], "mlflow": []}
    for _ in range(args.runs):
        with fresh_postgres_database("ampfleet_bench") as url:
            rates["ampfleet"].append(ours(args.points, args.batch, url))
        with fresh_postgres_database("mlflow_bench", migrate=False) as url:
            rates["mlflow"].append(mlflow(args.points, args.batch, url))
    ours_rate, mlflow_rate = (statistics.median(v) for v in rates.values())
    print(f"ingest, {args.points:,} points in batches of {args.batch}, median of {args.runs}:")
    print(f"  ampfleet agent path   {ours_rate:>10,.0f} points/s")
    print(f"  MLflow log-batch      {mlflow_rate:>10,.0f} points/s")
    print(f"  ampfleet / MLflow     {ours_rate / mlflow_rate:>10.1f}x")
    with fresh_postgres_database("ampfleet_bench") as url:
        query_million(url, args.runs)


if __name__ == "__main__":
    main()
