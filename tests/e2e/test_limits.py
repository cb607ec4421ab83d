"""Per-job limits with real processes: the runtime limit ends a job TIMED_OUT; past the
metric and log volume limits the excess is dropped and counted, an event says so, and the
job keeps running to success. A runtime alone is no limit but the goal: the job trains
until its time is up and succeeds with its model."""

from __future__ import annotations

import pytest

from tests.support.factories import job_spec

pytestmark = pytest.mark.e2e


@pytest.mark.slow  # long tier (make test-all): a fault, limit or load scenario
def test_runtime_and_volume_limits(make_fleet) -> None:
    fleet = make_fleet(
        extra_env={
            "AMPFLEET_MAX_METRIC_POINTS_PER_JOB": "300",
            "AMPFLEET_MAX_LOG_BYTES_PER_JOB": "600",
        }
    )
    slow = fleet.submit(job_spec(stop={"max_steps": 10_000_000, "max_runtime_s": 8}))
    chatty = fleet.submit(job_spec(stop={"max_steps": 200}, log_every_steps=1))
    timed_out = fleet.wait_for_state(slow["id"], {"TIMED_OUT"}, timeout=120)
    assert "max_runtime_s=8" in timed_out["failure_reason"]
    done = fleet.wait_for_state(chatty["id"], {"SUCCEEDED"}, timeout=120)
    volume = done["volume"]
    assert volume["metric_points"] == 300
    assert volume["metric_points_dropped"] > 0
    assert volume["log_bytes"] <= 600
    assert volume["log_lines_dropped"] > 0
    reasons = [e["reason"] for e in fleet.events(chatty["id"])]
    assert reasons.count("metric_points_limit_reached") == 1
    assert reasons.count("log_limit_reached") == 1


@pytest.mark.slow  # long tier (make test-all): a fault, limit or load scenario
def test_a_runtime_only_job_trains_until_its_time_is_up_and_succeeds(make_fleet) -> None:
    fleet = make_fleet()
    job = fleet.submit(job_spec(stop={"max_runtime_s": 10}))
    done = fleet.wait_for_state(job["id"], {"SUCCEEDED"}, timeout=150)
    assert done["progress"]["total_steps"] is None
    assert done["progress"]["step"] >= 10
    assert "val_accuracy" in done["latest_metrics"]  # the final evaluation ran
    events = {e["reason"]: e for e in fleet.events(job["id"])}
    assert "stop.max_runtime_s is up" in events["runtime_reached"]["message"]
    assert "max_runtime" not in events  # the agent's limit never had to step in
    listed = fleet.http.get(f"/v1/jobs/{job['id']}/artifacts").json()["items"]
    assert {"model.safetensors", "manifest.json"} <= {a["name"] for a in listed}
