"""What a sweep reports from its trial rows: the best trial by the first objective, the
Pareto front under mixed directions, the precision report by measured precision; and the
spec's `start_with` points checked against the space."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from ampfleet.api.sweeps import results
from ampfleet.core.models import SweepTrial
from ampfleet.core.sweep_spec import Objective, SweepSpec, apply_params

ACCURACY = Objective(metric="val_accuracy", direction="maximize")
TIME = Objective(metric="step_time_s", direction="minimize")


def trial(number: int, values: list[float] | None, state: str = "complete", **measures: Any):
    return SweepTrial(
        number=number, state=state, values=values, params={}, measures=measures, intermediate={}
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
    report = results.precision_report(trials, [ACCURACY, TIME])
    assert report == [
        {"precision": "bf16", "trials": 2, "best_trial": 2, "value": 0.93,
         "samples_per_s": 180.0, "slot_s": None},
        {"precision": "fp32", "trials": 2, "best_trial": 1, "value": 0.95,
         "samples_per_s": 90.0, "slot_s": None},
    ]  # fmt: skip
    assert results.best([trials[4]], [ACCURACY]) is None


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
