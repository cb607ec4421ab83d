"""Sweeps end to end, with real processes: trials are jobs that the scheduler places under the
sweep's concurrency and budget, ASHA stops the laggards, the numerics pruner stops a trial
that diverges, and the best trial is at least as good as the recipe's defaults."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.support.fleet import Fleet, fleet_cli
from tests.support.fleet_sweeps import DEFAULT_LR, EVAL_EVERY, STEPS, base, wait_for_sweep

pytestmark = pytest.mark.e2e


def final_accuracy(fleet: Fleet, job_id: str) -> float:
    series = fleet.http.get(f"/v1/jobs/{job_id}/metrics", params={"names": "val_accuracy"})
    (accuracy,) = series.json()["series"]
    return float(accuracy["points"][-1]["value"])


def test_an_asha_sweep_over_learning_rate_and_precision(fleet: Fleet) -> None:
    spec = {
        "name": "digits-lr",
        "base": base(),
        "space": {
            "learning_rate": {"type": "log_uniform", "low": 1e-4, "high": 3e-2},
            "precision": {"type": "categorical", "choices": ["fp32", "bf16"]},
        },
        "start_with": [{"learning_rate": DEFAULT_LR, "precision": "fp32"}],
        "objectives": [{"metric": "val_accuracy", "direction": "maximize"}],
        "sampler": {"type": "tpe", "seed": 3},
        "pruner": {"type": "asha", "min_resource": EVAL_EVERY, "reduction_factor": 2},
        "budget": {"max_trials": 8, "max_concurrent": 2},
    }
    response = fleet.http.post("/v1/sweeps", json=spec)
    assert response.status_code == 202, response.text
    default = fleet.submit(base())  # the recipe's defaults, beside the sweep
    sweep = wait_for_sweep(fleet, response.json()["id"])

    assert sweep["state"] == "SUCCEEDED", sweep["reason"]
    trials = sweep["trials"]
    assert [t["number"] for t in trials] == list(range(8))
    jobs = fleet.http.get("/v1/jobs", params={"limit": 50}).json()["items"]
    ours = [j for j in jobs if j["labels"].get("sweep") == sweep["id"]]
    assert sorted(j["labels"]["trial"] for j in ours) == [str(n) for n in range(8)]
    assert {t["job_id"] for t in trials} == {j["id"] for j in ours}  # one job per trial
    pruned = [t for t in trials if t["state"] == "pruned"]
    assert pruned, [(t["state"], t["reason"]) for t in trials]
    stopped_early = 0
    for trial in pruned:
        assert trial["reason"].startswith("asha: val_accuracy"), trial["reason"]
        events = fleet.events(trial["job_id"])
        assert any(e["reason"] == "pruned" for e in events)
        # The sweep may end while a pruned trial's ranks are still stopping; and a trial
        # pruned at its last evaluation may finish its last step before the cancel lands
        # (and end CANCELLED at it, where the cancel came while the ranks were finishing).
        job = fleet.wait_for_state(trial["job_id"], {"CANCELLED", "SUCCEEDED"}, timeout=120)
        assert job["progress"]["step"] <= STEPS
        if job["state"] == "CANCELLED" and job["progress"]["step"] < STEPS:
            stopped_early += 1
        elif job["state"] == "SUCCEEDED":
            assert job["progress"]["step"] == STEPS
    assert stopped_early, "ASHA stopped no trial before its end"

    best = sweep["best_trial"]
    assert best["state"] == "complete"
    fleet.wait_for_state(default["id"], {"SUCCEEDED"})
    assert best["values"][0] == final_accuracy(fleet, best["job_id"])
    assert best["values"][0] >= final_accuracy(fleet, default["id"])
    report = {row["precision"]: row for row in sweep["precision_report"]}
    assert set(report) == {t["params"]["precision"] for t in trials}  # pruned ones too
    assert report[best["params"]["precision"]]["trial"] == best["number"]
    for row in report.values():
        assert row["samples_per_s"] > 0
        if row["state"] == "complete":
            assert row["value"] <= best["values"][0]
        else:
            assert row["reason"], row
    assert sweep["slot_s"]["pruned"] > 0
    events = fleet.http.get(f"/v1/sweeps/{sweep['id']}/events").json()["items"]
    assert [e["trial"] for e in events if e["type"] == "sweep.trial_started"] == list(range(8))
    assert {e["trial"] for e in events if e["type"] == "sweep.trial_pruned"} == {
        t["number"] for t in pruned
    }
    assert events[-1]["type"] == "sweep.succeeded"
    for trial in pruned:  # a pruned trial's slot-seconds are goodput's `pruned`
        goodput = fleet.job(trial["job_id"])["goodput"]
        assert goodput["pruned_slot_s"] == goodput["allocated_slot_s"] > 0


def test_a_diverging_trial_is_pruned_for_its_numerics(fleet: Fleet) -> None:
    spec = {
        "base": base(stop={"max_steps": 3000}, eval_every_steps=0),
        "space": {"learning_rate": {"type": "categorical", "choices": [1.0]}},
        "start_with": [{"learning_rate": 1.0}],
        "objectives": [{"metric": "val_accuracy", "direction": "maximize"}],
        "budget": {"max_trials": 1, "max_concurrent": 1},
        "numerics": {"divergence_factor": 5},
    }
    response = fleet.http.post("/v1/sweeps", json=spec)
    assert response.status_code == 202, response.text
    sweep = wait_for_sweep(fleet, response.json()["id"])
    (trial,) = sweep["trials"]
    assert trial["state"] == "pruned", trial
    assert trial["reason"].startswith("numerics: "), trial["reason"]
    assert sweep["state"] == "FAILED"
    assert sweep["reason"] == "its trial budget spent; no trial completed"
    events = fleet.events(trial["job_id"])
    (pruned,) = [e for e in events if e["reason"] == "pruned"]
    assert pruned["message"] == trial["reason"]


def test_the_cli_starts_and_follows_a_sweep(fleet: Fleet, tmp_path: Path) -> None:
    spec = {
        "base": base(stop={"max_steps": 20}, eval_every_steps=10),
        "space": {"precision": {"type": "categorical", "choices": ["fp32", "bf16"]}},
        "objectives": [
            {"metric": "val_accuracy", "direction": "maximize"},
            {"metric": "samples_per_s", "direction": "maximize", "reduce": "mean"},
        ],
        "sampler": {"type": "grid"},
        "budget": {"max_trials": 5, "max_concurrent": 2},  # the grid has 2 points
    }
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(spec))
    result = fleet_cli(fleet, "sweep", "sweep.yaml", "--follow", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "precision report" in result.stdout
    (listed,) = fleet.http.get("/v1/sweeps").json()["items"]
    sweep = fleet.http.get(f"/v1/sweeps/{listed['id']}").json()
    assert sweep["state"] == "SUCCEEDED"
    assert sorted(t["params"]["precision"] for t in sweep["trials"]) == ["bf16", "fp32"]
    assert sweep["best_trial"] is None  # two objectives: the Pareto front instead
    assert 1 <= len(sweep["pareto_front"]) <= 2
    status = fleet_cli(fleet, "sweep-status", listed["id"], cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    assert f"sweep {listed['id']} SUCCEEDED" in status.stdout
