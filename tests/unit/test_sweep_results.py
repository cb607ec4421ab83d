"""What a sweep reports from its trial rows: the best trial by the first objective, the
Pareto front under mixed directions, the precision report (per precision tried, the best
configuration's trial where it ran, pruned and failed precisions with their reasons); and
the spec's `start_with` points checked against the space."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from ampfleet.api.sweeps import results
from ampfleet.core.models import SweepTrial
from ampfleet.core.sweep_spec import Objective, SweepSpec, apply_params

ACCURACY = Objective(metric="val_accuracy", direction="maximize")
TIME = Objective(metric="step_time_s", direction="minimize")


def trial(
    number: int,
    values: list[float] | None,
    state: str = "complete",
    params: dict[str, Any] | None = None,
    reason: str | None = None,
    intermediate: dict[str, float] | None = None,
    **measures: Any,
) -> SweepTrial:
    return SweepTrial(
        number=number,
        state=state,
        values=values,
        params=params or {},
        measures=measures,
        intermediate=intermediate or {},
        reason=reason,
    )


def test_the_best_trial_and_the_front() -> None:
    trials = [
        trial(0, [0.90, 0.010], precision="fp32", samples_per_s=100.0),
        trial(1, [0.95, 0.020], precision="fp32", samples_per_s=90.0),
        trial(2, [0.93, 0.005], precision="bf16", samples_per_s=180.0),
        trial(3, [0.80, 0.030], precision="bf16", samples_per_s=170.0),  # beaten by 2
        trial(4, None, state="pruned", precision="bf16"),
    ]
    top = results.best(trials, [ACCURACY, TIME])  # by the first objective
    assert top is not None
    assert top.number == 1
    front = results.pareto_front(trials, [ACCURACY, TIME])
    assert [t.number for t in front] == [1, 2]
    report = {row["precision"]: row for row in results.precision_report(trials, [ACCURACY, TIME])}
    assert list(report) == ["bf16", "fp32"]
    assert (report["bf16"]["trials"], report["bf16"]["complete"]) == (3, 2)
    assert (report["bf16"]["trial"], report["bf16"]["value"]) == (2, 0.93)
    assert (report["fp32"]["trial"], report["fp32"]["samples_per_s"]) == (1, 90.0)
    assert results.best([trials[4]], [ACCURACY]) is None


def test_the_precision_report_takes_the_best_configuration_in_each_precision() -> None:
    lr = {"learning_rate": 0.01}
    trials = [
        trial(0, [0.95], params={**lr, "precision": "fp32"}, samples_per_s=100.0, steps=30),
        trial(1, [0.97], params={"learning_rate": 0.1, "precision": "bf16"}, steps=30),
        trial(2, [0.94], params={**lr, "precision": "bf16"}, samples_per_s=190.0, steps=30),
        trial(
            3,
            None,
            "pruned",
            {**lr, "precision": "fp16"},
            "numerics: fp16 loss scale collapsed to 0.5 at step 12 (below 1)",
            {"10": 0.41},
            samples_per_s=210.0,
            steps=12,
        ),
        trial(4, None, "failed", {"learning_rate": 0.3, "precision": "fp16"}, "its job FAILED"),
    ]
    report = {row["precision"]: row for row in results.precision_report(trials, [ACCURACY])}
    best = report["bf16"]  # the best trial itself
    assert (best["trial"], best["same_configuration"], best["value"]) == (1, True, 0.97)
    fp32 = report["fp32"]
    assert (fp32["trial"], fp32["same_configuration"]) == (0, False)  # none at lr 0.1
    fp16 = report["fp16"]
    assert (fp16["trials"], fp16["complete"], fp16["best_trial"]) == (2, 0, None)
    assert (fp16["trial"], fp16["state"], fp16["value"]) == (3, "pruned", None)  # furthest
    assert fp16["reason"].startswith("numerics: fp16 loss scale collapsed")
    assert fp16["last_reported"] == {"step": 10, "value": 0.41}
    assert fp16["samples_per_s"] == 210.0
    same = [*trials, trial(5, [0.90], params={"learning_rate": 0.1, "precision": "fp32"})]
    fp32 = {r["precision"]: r for r in results.precision_report(same, [ACCURACY])}["fp32"]
    assert (fp32["trial"], fp32["same_configuration"], fp32["value"]) == (5, True, 0.90)
    assert fp32["best_trial"] == 0  # the best of fp32 is another configuration


def _spec(**overrides: Any) -> dict[str, Any]:
    return {
        "base": {"recipe": "digits"},
        "space": {
            "learning_rate": {"type": "log_uniform", "low": 1e-4, "high": 1e-1},
            "hidden": {"type": "int", "low": 64, "high": 512, "step": 64},
            "precision": {"type": "categorical", "choices": ["fp32", "bf16"]},
        },
        "objectives": [{"metric": "val_accuracy", "direction": "maximize"}],
        "budget": {"max_trials": 4},
        **overrides,
    }


@pytest.mark.parametrize(
    ("point", "words"),
    [
        ({"learning_rate": 1e-3, "hidden": 64}, "names"),
        ({"learning_rate": 1.0, "hidden": 64, "precision": "fp32"}, "outside"),
        ({"learning_rate": 1e-3, "hidden": 100, "precision": "fp32"}, "steps"),
        ({"learning_rate": 1e-3, "hidden": 64, "precision": "fp64"}, "none of its choices"),
    ],
)
def test_a_start_point_outside_the_space_is_refused(point: dict[str, Any], words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        SweepSpec.model_validate(_spec(start_with=[point]))


def test_platform_fields_and_hyperparameters_land_where_they_belong() -> None:
    spec = apply_params(
        {"recipe": "digits", "hyperparameters": {"dropout": 0.0}},
        {"learning_rate": 0.01, "precision": "bf16", "parallelism.strategy": "ddp"},
    )
    assert spec == {
        "recipe": "digits",
        "hyperparameters": {"dropout": 0.0, "learning_rate": 0.01},
        "precision": "bf16",
        "parallelism": {"strategy": "ddp"},
    }
