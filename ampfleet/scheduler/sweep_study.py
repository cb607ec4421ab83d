"""A sweep's Optuna study, rebuilt from ampfleet's rows on every pass.

Optuna's own storage is not used: the trial rows (params with their distributions, the
intermediate values told to the pruner, the state, the values, the system attributes the
sampler and the pruner keep, such as ASHA's completed rungs and NSGA-II's generations) are
the one source of truth, written in the same transaction as the jobs they run as. A scheduler
that restarts rebuilds the same history; a trial is never lost or asked twice.

Samplers are reseeded per trial number (a seed mixed from the sweep's seed and the number):
a study rebuilt from the same history asks the same trial again, so a fresh sampler with the
sweep's seed alone would repeat its first choice on every pass. The grid sampler is the
exception: it takes the grid's points in the order of one shuffle by the sweep's seed.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
    distribution_to_json,
    json_to_distribution,
)
from optuna.trial import FrozenTrial, TrialState, create_trial

from ampfleet.core.models import SweepTrial
from ampfleet.core.sweep_spec import (
    Categorical,
    IntRange,
    LogUniform,
    PrunerKind,
    SamplerKind,
    SweepSpec,
    Uniform,
)

optuna.logging.set_verbosity(optuna.logging.WARNING)
log = logging.getLogger(__name__)

STATES = {
    "running": TrialState.RUNNING,
    "complete": TrialState.COMPLETE,
    "pruned": TrialState.PRUNED,
    "failed": TrialState.FAIL,
    "cancelled": TrialState.FAIL,
}


def distributions(spec: SweepSpec) -> dict[str, BaseDistribution]:
    out: dict[str, BaseDistribution] = {}
    for name, dimension in spec.space.items():
        if isinstance(dimension, Uniform):
            out[name] = FloatDistribution(dimension.low, dimension.high)
        elif isinstance(dimension, LogUniform):
            out[name] = FloatDistribution(dimension.low, dimension.high, log=True)
        elif isinstance(dimension, IntRange):
            step = 1 if dimension.log else dimension.step
            out[name] = IntDistribution(dimension.low, dimension.top, log=dimension.log, step=step)
        elif isinstance(dimension, Categorical):
            out[name] = CategoricalDistribution(dimension.choices)
    return out


def grid_size(spec: SweepSpec) -> int | None:
    if spec.sampler.type is not SamplerKind.GRID:
        return None
    size = 1
    for dimension in spec.space.values():
        if isinstance(dimension, Categorical):
            size *= len(dimension.choices)
        elif isinstance(dimension, IntRange):
            size *= dimension.count
        else:  # the spec's validator refuses a grid over a continuous range
            raise TypeError(f"a grid cannot walk a {type(dimension).__name__} range")
    return size


def trial_seed(sweep_seed: int, number: int) -> int:
    """Trial `number`'s sampler seed, mixed from the sweep's seed and the number by numpy's
    SeedSequence. Not their sum: with it, trial n + 1 of seed s was trial n of seed s + 1,
    and two sweeps with neighbouring seeds tried the same configurations, one trial apart."""
    return int(np.random.SeedSequence((sweep_seed, number)).generate_state(1)[0]) % 2**31


def sampler(spec: SweepSpec, number: int) -> optuna.samplers.BaseSampler:
    seed = trial_seed(spec.sampler.seed, number)
    kind = spec.sampler.type
    if kind is SamplerKind.RANDOM:
        return optuna.samplers.RandomSampler(seed=seed)
    if kind is SamplerKind.GRID:
        space: dict[str, Any] = {}
        for name, dimension in spec.space.items():
            if isinstance(dimension, Categorical):
                space[name] = list(dimension.choices)
            elif isinstance(dimension, IntRange):
                space[name] = list(range(dimension.low, dimension.top + 1, dimension.step))
        # Not reseeded: the grid's order is a shuffle by its seed, and trial n takes point
        # n of it, so every pass must shuffle alike.
        return optuna.samplers.GridSampler(space, seed=spec.sampler.seed)
    if kind is SamplerKind.NSGAII:
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=_population(spec))
    # A few random trials first, fewer than Optuna's 10 for sweeps of a dozen trials.
    startup = max(2, min(10, spec.budget.max_trials // 3))
    return optuna.samplers.TPESampler(
        seed=seed,
        n_startup_trials=startup,
        constant_liar=True,  # concurrent trials: do not ask twice for the same point
        multivariate=True,
    )


def _population(spec: SweepSpec) -> int:
    return max(2, min(50, spec.budget.max_trials // 4))


def pruner(spec: SweepSpec) -> optuna.pruners.BasePruner:
    config = spec.pruner
    if config.type is PrunerKind.MEDIAN:
        return optuna.pruners.MedianPruner(
            n_startup_trials=config.startup_trials, n_warmup_steps=config.warmup_steps
        )
    if config.type is PrunerKind.ASHA:
        return optuna.pruners.SuccessiveHalvingPruner(
            min_resource=config.min_resource, reduction_factor=config.reduction_factor
        )
    if config.type is PrunerKind.HYPERBAND:
        return optuna.pruners.HyperbandPruner(
            min_resource=config.min_resource,
            max_resource=spec.base.stop.max_steps or "auto",
            reduction_factor=config.reduction_factor,
        )
    return optuna.pruners.NopPruner()


def build(name: str, spec: SweepSpec, trials: list[SweepTrial]) -> optuna.Study:
    """The study with every trial so far, in number order (Optuna's numbers are ours).
    `name` is the sweep's id: Hyperband puts a trial in a bracket by a hash of the study's
    name and the trial's number, so a name that changed from pass to pass would move every
    trial to another bracket, and compare it with other rivals, on every rebuild."""
    directions = [objective.direction for objective in spec.objectives]
    study = optuna.create_study(
        study_name=name,
        directions=directions,
        sampler=sampler(spec, len(trials)),
        pruner=pruner(spec),
    )
    for row in sorted(trials, key=lambda t: t.number):
        study.add_trial(frozen(row, len(directions)))
    return study


def frozen(row: SweepTrial, objectives: int) -> FrozenTrial:
    state = STATES[row.state]
    values = row.values if state is TrialState.COMPLETE else None
    if state is TrialState.COMPLETE and (values is None or len(values) != objectives):
        state, values = TrialState.FAIL, None  # cannot happen from the controller's rows
    return create_trial(
        state=state,
        values=values,
        params=row.params,
        distributions={k: json_to_distribution(v) for k, v in row.distributions.items()},
        system_attrs=dict(row.system_attrs),
        intermediate_values={int(step): float(v) for step, v in row.intermediate.items()},
    )


def ask(
    study: optuna.Study, spec: SweepSpec
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The next trial's params, its distributions as JSON and its system attributes: the
    spec's `start_with` points first, then the sampler's."""
    number = len(study.trials)
    if number < len(spec.start_with):
        study.enqueue_trial(dict(spec.start_with[number]))
    trial = study.ask(fixed_distributions=distributions(spec))
    stored = study.trials[trial.number]
    dists = {k: distribution_to_json(v) for k, v in stored.distributions.items()}
    return dict(stored.params), dists, _json_attrs(stored.system_attrs)


def report(study: optuna.Study, number: int, points: list[tuple[int, float]]) -> bool:
    """Tells the study the running trial's new intermediate values in step order; whether
    the pruner would stop it at any of them (the rungs it passes are recorded all the same,
    so a trial that finished between two passes still counts as a competitor)."""
    trial = optuna.trial.Trial(study, study.trials[number]._trial_id)
    prune = False
    for step, value in points:
        trial.report(value, step)
        prune = prune or trial.should_prune()
    return prune


def attrs_of(study: optuna.Study, number: int) -> dict[str, Any]:
    return _json_attrs(study.trials[number].system_attrs)


def _json_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    """System attributes as the JSON column keeps them (tuples become lists, as Optuna's
    own RDB storage does)."""
    return {key: list(v) if isinstance(v, tuple) else v for key, v in attrs.items()}
