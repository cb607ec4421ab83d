"""The sweep controller pass after pass, with the trials' jobs run, reporting and holding
slots as a node would have them (real database, no fleet; both backends): Hyperband prunes
as one continuous Optuna study would, spent slot-hours cancel the running trials, the
numerics pruner stops an fp16 trial whose scale collapsed and one that fell back (both in the
precision report, with their reasons, their slot-seconds counted as pruned), the platform's
own objectives (slot-seconds, and slot-seconds per unit of quality), and what the trials
held is read in the same few statements however many run."""

from __future__ import annotations

import optuna
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event, select

from ampfleet.core.db import get_engine, session_scope
from ampfleet.core.models import Job, SweepTrial
from ampfleet.core.states import JobState
from ampfleet.scheduler import sweep_trials
from tests.support.factories import add_points
from tests.support.sweeps import (
    controller_pass,
    end_jobs,
    note,
    run,
    sweep_spec,
    trial_jobs,
)

TRIALS = 12
SWEEPS_TRIED = 5


def _reference_prunes(sweep_id: str, rounds: list[tuple[int, list[float]]]) -> list[set[int]]:
    """The trials one Optuna study, kept in memory from start to end, prunes in each round
    of reports (step, value of trial n), trials in number order as the controller tells
    them."""
    study = optuna.create_study(
        study_name=sweep_id,
        direction="maximize",
        pruner=optuna.pruners.HyperbandPruner(min_resource=10, max_resource=40, reduction_factor=2),
    )
    trials = [study.ask() for _ in range(TRIALS)]
    pruned: set[int] = set()
    out = []
    for step, values in rounds:
        now: set[int] = set()
        for number, trial in enumerate(trials):
            if number in pruned:
                continue
            trial.report(values[number], step)
            if trial.should_prune():
                now.add(number)
        pruned |= now
        out.append(now)
    return out


def _pruned(client: TestClient, sweep_id: str) -> set[int]:
    trials = client.get(f"/v1/sweeps/{sweep_id}").json()["trials"]
    return {t["number"] for t in trials if t["state"] == "pruned"}


def test_hyperband_prunes_as_one_continuous_study_would(client: TestClient) -> None:
    spec = sweep_spec(
        base={"recipe": "digits", "stop": {"max_steps": 40}, "eval_every_steps": 10},
        pruner={"type": "hyperband", "min_resource": 10, "reduction_factor": 2},
        budget={"max_trials": TRIALS, "max_concurrent": TRIALS},
    )
    rounds = [
        (10, [0.90 - 0.03 * n for n in range(TRIALS)]),
        (20, [0.95 - 0.03 * n for n in range(TRIALS)]),
    ]
    # Optuna draws a trial's bracket from a hash of the study's name (the sweep's id): in
    # about one sweep of 40 no bracket holds two trials at its first rung, and nothing is
    # pruned there. Such a sweep is cancelled and another made.
    for _ in range(SWEEPS_TRIED):
        sweep = client.post("/v1/sweeps", json=spec).json()
        expected = _reference_prunes(sweep["id"], rounds)
        if expected[0]:
            break
        assert client.post(f"/v1/sweeps/{sweep['id']}/cancel").status_code == 202
    assert expected[0], "no bracket held two trials at its first rung"
    controller_pass()
    jobs = trial_jobs(sweep["id"])
    assert len(jobs) == TRIALS
    for job in jobs:
        run(job.id)
    for (step, values), prunes in zip(rounds, expected, strict=True):
        for job in trial_jobs(sweep["id"]):
            if job.state == JobState.RUNNING:
                add_points(job.id, "val_accuracy", [(step, values[job.trial or 0])])
        before = _pruned(client, sweep["id"])
        controller_pass()  # a new pass: the study is rebuilt from the trial rows
        assert _pruned(client, sweep["id"]) - before == prunes, step
    body = client.get(f"/v1/sweeps/{sweep['id']}").json()
    for trial in body["trials"]:
        if trial["state"] == "pruned":
            assert trial["reason"].startswith("hyperband: val_accuracy"), trial["reason"]
            assert client.get(f"/v1/jobs/{trial['job_id']}").json()["state"] == "CANCELLING"


def test_spent_slot_hours_cancel_the_running_trials(client: TestClient) -> None:
    spec = sweep_spec(
        pruner={"type": "none"},
        budget={"max_trials": 10, "max_concurrent": 2, "max_slot_hours": 0.01},  # 36 s
    )
    sweep = client.post("/v1/sweeps", json=spec).json()
    controller_pass()
    first, second = trial_jobs(sweep["id"])
    run(first.id, held_s=25)
    add_points(first.id, "val_accuracy", [(30, 0.8)])
    end_jobs([first.id], JobState.SUCCEEDED)
    controller_pass()  # 25 of 36 slot-seconds: trial 0 complete, trial 2 asked
    assert [j.trial for j in trial_jobs(sweep["id"])] == [0, 1, 2]
    run(second.id, held_s=15)
    controller_pass()  # 40 of 36: the running trials are cancelled, the sweep ends
    body = client.get(f"/v1/sweeps/{sweep['id']}").json()
    assert [t["state"] for t in body["trials"]] == ["complete", "cancelled", "cancelled"]
    reason = "sweep_budget: the sweep's 0.01 slot-hours are spent"
    assert [t["reason"] for t in body["trials"][1:]] == [reason, reason]
    assert body["state"] == "SUCCEEDED"
    assert body["reason"] == "sweep_budget: its 0.01 slot-hours spent; 1 complete"
    assert body["slot_s"]["total"] >= 36
    states = {j.trial: j.state for j in trial_jobs(sweep["id"])}
    assert states == {0: "SUCCEEDED", 1: "CANCELLING", 2: "CANCELLED"}  # 2 was still queued
    for job in trial_jobs(sweep["id"])[1:]:
        events = client.get(f"/v1/jobs/{job.id}/events").json()["items"]
        assert [(e["reason"], e["message"]) for e in events][-1] == ("sweep_budget", reason)
    controller_pass()
    assert len(trial_jobs(sweep["id"])) == 3  # none asked after the end


def test_the_numerics_pruner_stops_a_collapsed_scale_and_a_fallback(client: TestClient) -> None:
    spec = sweep_spec(
        space={"precision": {"type": "categorical", "choices": ["fp16", "bf16"]}},
        sampler={"type": "grid"},
        pruner={"type": "none"},
        budget={"max_trials": 2, "max_concurrent": 2},
    )
    sweep = client.post("/v1/sweeps", json=spec).json()
    controller_pass()
    jobs = {j.resolved["precision"]: j for j in trial_jobs(sweep["id"])}
    run(jobs["fp16"].id, held_s=20, precision="fp16")
    add_points(jobs["fp16"].id, "loss_scale", [(5, 1024.0), (10, 0.25)])
    add_points(jobs["fp16"].id, "samples_per_s", [(5, 300.0), (10, 320.0)])
    run(jobs["bf16"].id, held_s=20, precision="bf16")
    note(jobs["bf16"].id, "precision_fallback", "bf16 -> fp32 at step 8: non-finite gradients")
    controller_pass()
    body = client.get(f"/v1/sweeps/{sweep['id']}").json()
    reasons = {t["params"]["precision"]: t["reason"] for t in body["trials"]}
    assert reasons == {
        "fp16": "numerics: fp16 loss scale collapsed to 0.25 at step 10 (below 1)",
        "bf16": "numerics: precision fallback: bf16 -> fp32 at step 8: non-finite gradients",
    }
    assert {t["state"] for t in body["trials"]} == {"pruned"}
    assert body["state"] == "FAILED"
    report_rows = {row["precision"]: row for row in body["precision_report"]}
    assert set(report_rows) == {"fp16", "bf16"}
    for precision, row in report_rows.items():
        assert (row["state"], row["reason"], row["complete"]) == ("pruned", reasons[precision], 0)
    assert report_rows["fp16"]["samples_per_s"] == pytest.approx(310.0)
    for precision, job in jobs.items():
        events = client.get(f"/v1/jobs/{job.id}/events").json()["items"]
        assert (events[-1]["reason"], events[-1]["message"]) == ("pruned", reasons[precision])
        goodput = client.get(f"/v1/jobs/{job.id}").json()["goodput"]
        assert goodput["pruned_slot_s"] == goodput["allocated_slot_s"] >= 20
        assert goodput["training_slot_s"] == 0
    assert body["slot_s"]["pruned"] == pytest.approx(body["slot_s"]["total"])


def test_slot_seconds_and_slot_seconds_per_quality_as_objectives(client: TestClient) -> None:
    spec = sweep_spec(
        objectives=[
            {"metric": "val_accuracy", "direction": "maximize"},
            {"metric": "slot_seconds", "direction": "minimize"},
            {
                "metric": "slot_seconds_per_quality",
                "direction": "minimize",
                "quality": "val_accuracy",
                "reduce": "best",
            },
        ],
        pruner={"type": "none"},
        budget={"max_trials": 2, "max_concurrent": 2},
    )
    response = client.post("/v1/sweeps", json=spec)
    assert response.status_code == 202, response.text
    sweep = response.json()
    controller_pass()
    good, useless = trial_jobs(sweep["id"])
    for job, accuracy in ((good, [0.5, 0.8, 0.7]), (useless, [0.0, 0.0])):
        run(job.id, held_s=40)
        add_points(job.id, "val_accuracy", list(enumerate(accuracy)))
    end_jobs([good.id, useless.id], JobState.SUCCEEDED)
    controller_pass()
    trials = client.get(f"/v1/sweeps/{sweep['id']}").json()["trials"]
    accuracy, slot_s, per_quality = trials[0]["values"]
    assert accuracy == 0.7  # the last point
    assert slot_s == pytest.approx(trials[0]["measures"]["slot_s"], abs=0.01)
    assert slot_s >= 40
    assert per_quality == pytest.approx(slot_s / 0.8)  # reduce best: the best point
    assert (trials[1]["state"], trials[1]["reason"]) == (
        "failed",
        "val_accuracy was 0: slot-seconds per unit of it need it above 0",
    )


@pytest.mark.parametrize(
    ("objectives", "pruner", "words"),
    [
        ([{"metric": "slot_seconds", "direction": "maximize"}], "none", "is a cost"),
        ([{"metric": "slot_seconds_per_quality", "direction": "minimize"}], "none", "quality"),
        (
            [{"metric": "val_accuracy", "direction": "maximize", "quality": "val_accuracy"}],
            "none",
            "quality",
        ),
        ([{"metric": "slot_seconds", "direction": "minimize"}], "asha", "known only once"),
    ],
)
def test_platform_objectives_are_checked(
    client: TestClient, objectives: list[dict[str, str]], pruner: str, words: str
) -> None:
    response = client.post(
        "/v1/sweeps", json=sweep_spec(objectives=objectives, pruner={"type": pruner})
    )
    assert response.status_code == 422, response.text
    assert words in response.text


def _statements_of_slot_seconds(sweep_id: str) -> int:
    """How many statements the controller's slot-seconds read of the sweep takes."""
    statements = 0

    def count(*_args: object) -> None:
        nonlocal statements
        statements += 1

    with session_scope() as session:
        trials = list(session.scalars(select(SweepTrial).where(SweepTrial.sweep_id == sweep_id)))
        jobs = {j.id: j for j in session.scalars(select(Job).where(Job.sweep_id == sweep_id))}
        event.listen(get_engine(), "before_cursor_execute", count)
        try:
            held = sweep_trials.slot_seconds(session, trials, jobs)
        finally:
            event.remove(get_engine(), "before_cursor_execute", count)
    assert held >= 10 * len(jobs)
    return statements


def test_the_slot_seconds_of_a_sweep_take_the_same_reads_for_any_number_of_trials(
    client: TestClient,
) -> None:
    """What max_slot_hours is checked against every pass: one read for all running trials,
    not one per trial."""
    reads = []
    for running in (1, 6):
        spec = sweep_spec(
            pruner={"type": "none"},
            budget={"max_trials": 10, "max_concurrent": running, "max_slot_hours": 10},
        )
        sweep = client.post("/v1/sweeps", json=spec).json()
        controller_pass()
        for job in trial_jobs(sweep["id"]):
            run(job.id, held_s=10)
        reads.append(_statements_of_slot_seconds(sweep["id"]))
    assert reads[0] == reads[1], reads
