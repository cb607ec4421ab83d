"""The whole path with real processes: HTTP -> scheduler -> Celery -> torchrun ranks -> DB."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import create_engine, func, select

from ampfleet.core.models import Metric
from tests.support.factories import job_spec
from tests.support.files import readable_by_others
from tests.support.fleet import Fleet, database_url, fleet_per_module, rank_processes

pytestmark = pytest.mark.e2e

fleet = fleet_per_module()  # each test runs and reads jobs of its own


def metric_rows(fleet: Fleet, job_id: str) -> int:
    engine = create_engine(database_url(fleet.env))
    try:
        with engine.connect() as conn:
            return conn.scalar(select(func.count()).where(Metric.job_id == job_id)) or 0
    finally:
        engine.dispose()


@pytest.mark.both_configurations  # the path every job takes, on what `make run` starts too
def test_digits_two_ranks_bf16_to_succeeded(fleet: Fleet) -> None:
    spec = job_spec(
        name="digits-e2e",
        stop={"max_steps": 200},
        eval_every_steps=50,
        log_every_steps=1,
        precision="bf16",
        allreduce_dtype="bf16",
    )
    job = fleet.submit(spec)
    assert job["state"] == "QUEUED"

    done = fleet.wait_for_state(job["id"], {"SUCCEEDED"})
    assert done["attempt"] == 1
    assert done["progress"]["step"] == done["progress"]["total_steps"] == 200
    assert done["precision"]["effective"] == "bf16"
    assert done["allreduce_dtype"]["effective"] == "bf16"
    assert done["latest_metrics"]["val_accuracy"] >= 0.9
    assert done["started_at"]
    assert done["finished_at"]

    transitions = [e["to_state"] for e in fleet.events(job["id"]) if e["kind"] == "transition"]
    assert transitions == ["QUEUED", "SCHEDULED", "STARTING", "RUNNING", "SUCCEEDED"]
    # Goodput: both slots held, most of it in training steps, the rest accounted for.
    goodput = done["goodput"]
    kinds = ("training", "startup", "recomputed", "checkpoint", "evaluation", "other")
    assert goodput["attempts"] == 1
    assert goodput["recomputed_slot_s"] == 0
    assert goodput["training_slot_s"] > 0
    assert goodput["startup_slot_s"] > 0
    assert goodput["evaluation_slot_s"] > 0
    assert goodput["checkpoint_slot_s"] > 0
    assert sum(goodput[f"{kind}_slot_s"] for kind in kinds) == pytest.approx(
        goodput["allocated_slot_s"], abs=0.01
    )
    assert 0 < goodput["ratio"] < 1

    metrics = fleet.http.get(f"/v1/jobs/{job['id']}/metrics").json()
    series = {s["name"]: s["points"] for s in metrics["series"]}
    assert {"loss", "learning_rate", "samples_per_s", "step_time_s", "val_accuracy"} <= set(series)
    assert len(series["loss"]) == 200
    # The node agent's telemetry of both ranks, at steps the job reached.
    for rank in (0, 1):
        assert series[f"rss_mb_rank{rank}"][-1]["value"] > 50
        assert all(0 < p["step"] <= 200 for p in series[f"cpu_percent_rank{rank}"])
    assert series["val_accuracy"][-1]["value"] >= 0.9
    assert metric_rows(fleet, job["id"]) >= 200 * 5
    assert rank_processes(job["id"]) == []
    # Run folders, rank logs, checkpoints (and the embedded database): the owner's alone.
    assert readable_by_others(fleet.root / "var") == []


def test_cancel_stops_every_rank(fleet: Fleet) -> None:
    job = fleet.submit(job_spec(stop={"max_steps": 5_000_000}, log_every_steps=50))
    fleet.wait_for_state(job["id"], {"RUNNING"})
    fleet.wait_until(
        lambda: len(rank_processes(job["id"])) >= 3, timeout=30, what="torchrun and both ranks"
    )
    response = fleet.http.post(f"/v1/jobs/{job['id']}/cancel")
    assert response.status_code == 202
    assert response.json()["state"] == "CANCELLING"

    cancelled = fleet.wait_for_state(job["id"], {"CANCELLED"}, timeout=60)
    assert cancelled["finished_at"] is not None
    assert rank_processes(job["id"]) == []
    transitions = [e["to_state"] for e in fleet.events(job["id"]) if e["kind"] == "transition"]
    assert transitions[-2:] == ["CANCELLING", "CANCELLED"]
    nodes = fleet.http.get("/v1/nodes").json()["items"]
    assert all(n["used_slots"] == 0 for n in nodes)


def test_training_error_fails_with_an_actionable_reason(fleet: Fleet) -> None:
    job = fleet.submit(job_spec(hyperparameters={"batch_size": 4096}))
    failed = fleet.wait_for_state(job["id"], {"FAILED"})
    assert "smaller than one batch per rank" in failed["failure_reason"]
    assert failed["failure_reason"].startswith("rank ")
    assert rank_processes(job["id"]) == []


def test_logs_of_every_rank_are_kept_and_followable(fleet: Fleet) -> None:
    job = fleet.submit(job_spec(stop={"max_steps": 60}, log_every_steps=10))
    fleet.wait_for_state(job["id"], {"SUCCEEDED"})
    page = fleet.http.get(f"/v1/jobs/{job['id']}/logs").json()
    ranks = {line["rank"] for line in page["items"]}
    assert ranks == {0, 1}
    assert any("step 60/60" in line["line"] for line in page["items"])
    only_one = fleet.http.get(f"/v1/jobs/{job['id']}/logs", params={"rank": 1}).json()
    assert {line["rank"] for line in only_one["items"]} == {1}
    tail = fleet.http.get(f"/v1/jobs/{job['id']}/logs", params={"tail": 2}).json()["items"]
    assert [line["id"] for line in tail] == [line["id"] for line in page["items"][-2:]]
    with fleet.http.stream(
        "GET", f"/v1/jobs/{job['id']}/logs", headers={"Accept": "text/event-stream"}
    ) as stream:
        body = "".join(stream.iter_text())
    assert "event: logs" in body
    assert body.rstrip().endswith('data: {"state":"SUCCEEDED"}')


def test_auto_allreduce_is_measured_and_the_choice_is_the_one_reported(fleet: Fleet) -> None:
    """On loopback either choice may win; whichever the measurement took is what the job
    reports it reduces in, with the figures in an event."""
    job = fleet.submit(job_spec(stop={"max_steps": 10}, allreduce_dtype="auto"))
    done = fleet.wait_for_state(job["id"], {"SUCCEEDED"})
    [measured] = [e for e in fleet.events(job["id"]) if e["reason"] == "allreduce_auto"]
    took = re.search(r"chose (\w+)(?: by the (swap|ring|gloo) wire)?$", measured["message"])
    assert took, measured["message"]
    chose = took.group(1)
    assert chose in {"bf16", "fp32"}
    assert "fp32" in measured["message"]
    assert done["allreduce_dtype"] == {"requested": "auto", "effective": chose}
