"""The controller's study, rebuilt from trial rows before every ask as the scheduler does it:
a grid is walked without repeating a point while trials still run, other samplers do not
repeat their first choice, ASHA's rungs survive the rebuild (the pruner stops a trial that
is behind the ones before it at the same rung), and so do Hyperband's brackets."""

from __future__ import annotations

from typing import Any

import optuna
import pytest

from ampfleet.core.models import SweepTrial
from ampfleet.core.sweep_spec import SweepSpec
from ampfleet.scheduler import sweep_study

SWEEP = "swp_test"


def _spec(sampler: str, seed: int = 5, **overrides: Any) -> SweepSpec:
    return SweepSpec.model_validate(
        {
            "base": {"recipe": "digits", "stop": {"max_steps": 40}},
            "space": {
                "precision": {"type": "categorical", "choices": ["fp32", "bf16"]},
                "hidden": {"type": "int", "low": 64, "high": 192, "step": 64},
            },
            "objectives": [{"metric": "val_accuracy", "direction": "maximize"}],
            "sampler": {"type": sampler, "seed": seed},
            "budget": {"max_trials": 6, "max_concurrent": 6},
            **overrides,
        }
    )


def _ask_all(spec: SweepSpec, count: int) -> list[SweepTrial]:
    trials: list[SweepTrial] = []
    for number in range(count):
        params, dists, attrs = sweep_study.ask(sweep_study.build(SWEEP, spec, trials), spec)
        trials.append(
            SweepTrial(
                number=number,
                state="running",
                params=params,
                distributions=dists,
                system_attrs=attrs,
                intermediate={},
                measures={},
            )
        )
    return trials


def test_a_grid_is_walked_once_while_its_trials_run() -> None:
    trials = _ask_all(_spec("grid"), 6)
    points = {(t.params["precision"], t.params["hidden"]) for t in trials}
    assert len(points) == 6


@pytest.mark.parametrize("sampler", ["random", "tpe", "nsgaii"])
def test_a_rebuilt_study_does_not_repeat_its_first_choice(sampler: str) -> None:
    trials = _ask_all(_spec(sampler), 4)
    assert len({tuple(sorted(t.params.items())) for t in trials}) > 1


@pytest.mark.parametrize("sampler", ["random", "tpe", "nsgaii"])
def test_neighbouring_seeds_try_different_configurations(sampler: str) -> None:
    space = {"learning_rate": {"type": "log_uniform", "low": 1e-5, "high": 1.0}}
    tried = {}
    for seed in (5, 6):
        spec = _spec(sampler, seed, space=space)
        tried[seed] = [t.params["learning_rate"] for t in _ask_all(spec, 4)]
    assert not set(tried[5]) & set(tried[6]), tried


def test_asha_rungs_survive_a_rebuild() -> None:
    spec = _spec("random", pruner={"type": "asha", "min_resource": 10, "reduction_factor": 2})
    first, second = _ask_all(spec, 2)
    study = sweep_study.build(SWEEP, spec, [first, second])
    assert not sweep_study.report(study, 0, [(10, 0.9)])
    first.system_attrs = sweep_study.attrs_of(study, 0)
    first.intermediate = {"10": 0.9}
    assert first.system_attrs["completed_rung_0"] == 0.9
    rebuilt = sweep_study.build(SWEEP, spec, [first, second])  # the next pass
    assert sweep_study.report(rebuilt, 1, [(10, 0.5)])  # behind trial 0 at rung 0


def _bracket(study: optuna.Study, number: int) -> int:
    pruner = study.pruner
    assert isinstance(pruner, optuna.pruners.HyperbandPruner)
    return pruner._get_bracket_id(study, study.trials[number])


def test_hyperband_keeps_each_trial_in_its_bracket_across_rebuilds() -> None:
    spec = _spec("random", pruner={"type": "hyperband", "min_resource": 1})
    trials = _ask_all(spec, 12)
    first = sweep_study.build(SWEEP, spec, trials)
    sweep_study.report(first, 0, [(1, 0.5)])  # Hyperband sets its brackets up on a report
    rebuilt = sweep_study.build(SWEEP, spec, trials)
    sweep_study.report(rebuilt, 0, [(1, 0.5)])
    brackets = [_bracket(first, n) for n in range(12)]
    assert len(set(brackets)) > 1  # 40 steps from 1 by 3: four brackets to spread over
    assert [_bracket(rebuilt, n) for n in range(12)] == brackets


def test_hyperband_prunes_a_laggard_in_its_bracket_on_a_later_pass() -> None:
    spec = _spec("random", pruner={"type": "hyperband", "min_resource": 10, "reduction_factor": 2})
    trials = _ask_all(spec, 12)
    study = sweep_study.build(SWEEP, spec, trials)
    sweep_study.report(study, 0, [(10, 0.9)])
    leader = trials[0]
    rival = next(n for n in range(1, 12) if _bracket(study, n) == _bracket(study, 0))
    leader.system_attrs = sweep_study.attrs_of(study, 0)
    leader.intermediate = {"10": 0.9}
    rebuilt = sweep_study.build(SWEEP, spec, trials)  # the next pass
    assert sweep_study.report(rebuilt, rival, [(10, 0.5)])
