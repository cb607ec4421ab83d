"""The sweep spec: a base job spec, a search space, objectives, a sampler, a pruner and a
budget. Plain pydantic, so the API validates a sweep without importing Optuna; the scheduler's
controller (scheduler/sweeps.py) turns it into Optuna's distributions, sampler and pruner.

A parameter named after a platform field (`precision`, `allreduce_dtype`,
`parallelism.strategy`, ...) sets that field of each trial's job spec; any other name is a
hyperparameter of the recipe. That is what lets one sweep answer "how much does half precision
buy here, and what does it cost in accuracy?" next to the learning rate.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from ampfleet.core.project_names import ProjectName
from ampfleet.core.spec import JobSpec, Priority, SafeName

MAX_TRIALS = 1000
MAX_DIMENSIONS = 32
MetricName = Annotated[
    str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")
]
ParameterName = Annotated[
    str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z_][A-Za-z0-9_.]*$")
]

PLATFORM_FIELDS: dict[str, tuple[str, ...]] = {
    "precision": ("precision",),
    "allreduce_dtype": ("allreduce_dtype",),
    "parallelism.strategy": ("parallelism", "strategy"),
    "parallelism.activation_checkpointing": ("parallelism", "activation_checkpointing"),
    "parallelism.compile": ("parallelism", "compile"),
    "resources.procs_per_node": ("resources", "procs_per_node"),
}
"""Parameters that set a field of the trial's job spec rather than a hyperparameter."""


class SweepState(StrEnum):
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    def is_terminal(self) -> bool:
        return self is not SweepState.RUNNING


class TrialState(StrEnum):
    RUNNING = "running"
    COMPLETE = "complete"
    PRUNED = "pruned"
    FAILED = "failed"
    CANCELLED = "cancelled"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Uniform(_Strict):
    type: Literal["uniform"]
    low: float
    high: float

    @model_validator(mode="after")
    def _ordered(self) -> Uniform:
        if not self.low < self.high:
            raise ValueError(f"low ({self.low}) must be below high ({self.high})")
        return self


class LogUniform(_Strict):
    type: Literal["log_uniform"]
    low: float = Field(gt=0)
    high: float = Field(gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> LogUniform:
        if not self.low < self.high:
            raise ValueError(f"low ({self.low}) must be below high ({self.high})")
        return self


class IntRange(_Strict):
    type: Literal["int"]
    low: int = Field(ge=-(10**9), le=10**9)
    high: int = Field(ge=-(10**9), le=10**9)
    step: int = Field(1, ge=1, le=10**9)
    log: bool = False

    @model_validator(mode="after")
    def _ordered(self) -> IntRange:
        if not self.low <= self.high:
            raise ValueError(f"low ({self.low}) must not be above high ({self.high})")
        if self.log and (self.low < 1 or self.step != 1):
            raise ValueError("a log int range needs low >= 1 and step 1")
        return self

    @property
    def top(self) -> int:
        """The largest value on the grid of `step` from `low`."""
        return self.high - (self.high - self.low) % self.step

    @property
    def count(self) -> int:
        return (self.top - self.low) // self.step + 1


Choice = bool | int | float | Annotated[str, StringConstraints(max_length=128)]


class Categorical(_Strict):
    type: Literal["categorical"]
    choices: list[Choice] = Field(min_length=1, max_length=64)


Dimension = Annotated[Uniform | LogUniform | IntRange | Categorical, Field(discriminator="type")]


SLOT_SECONDS = "slot_seconds"
SLOT_SECONDS_PER_QUALITY = "slot_seconds_per_quality"
PLATFORM_MEASURES = (SLOT_SECONDS, SLOT_SECONDS_PER_QUALITY)
"""Objectives the platform computes from the trial's job, not from its metric points."""


class Objective(_Strict):
    """A metric the trial reports (`val_accuracy`, `loss`) or that the platform measures
    for it: `samples_per_s` (reported each logged step), `slot_seconds` (what its job held,
    from its goodput) or `slot_seconds_per_quality` (those divided by the `quality` metric's
    value). `reduce` says which of a metric's points is the trial's value (of `quality`'s,
    for slot-seconds per quality)."""

    metric: MetricName
    direction: Literal["minimize", "maximize"]
    reduce: Literal["last", "best", "mean"] = "last"
    quality: MetricName | None = Field(
        None,
        description="slot_seconds_per_quality: the reported metric that measures quality "
        "(val_accuracy, ...): larger is better, and must be above 0.",
    )

    @model_validator(mode="after")
    def _measure(self) -> Objective:
        if (self.metric == SLOT_SECONDS_PER_QUALITY) != (self.quality is not None):
            raise ValueError(
                "quality: give it with metric slot_seconds_per_quality (the metric it divides "
                "by), and only then"
            )
        if self.metric in PLATFORM_MEASURES and self.direction != "minimize":
            raise ValueError(f"{self.metric} is a cost: its direction is minimize")
        return self


class SamplerKind(StrEnum):
    RANDOM = "random"
    GRID = "grid"
    TPE = "tpe"
    NSGAII = "nsgaii"


class Sampler(_Strict):
    type: SamplerKind = SamplerKind.TPE
    seed: int = Field(0, ge=0, le=2**31 - 1)


class PrunerKind(StrEnum):
    NONE = "none"
    MEDIAN = "median"
    ASHA = "asha"
    HYPERBAND = "hyperband"


class Pruner(_Strict):
    """Early stopping on intermediate values: the points of `metric` (default: the first
    objective's) by step. Resources are in steps."""

    type: PrunerKind = PrunerKind.NONE
    metric: MetricName | None = None
    min_resource: int = Field(1, ge=1, le=10**9, description="Steps before the first rung.")
    reduction_factor: int = Field(3, ge=2, le=100)
    warmup_steps: int = Field(0, ge=0, le=10**9, description="median: steps never pruned.")
    startup_trials: int = Field(2, ge=0, le=1000, description="median: trials before it prunes.")


class Numerics(_Strict):
    """The numerics-aware pruner: stops a trial whose numbers went bad, whatever its metric
    says, before it spends the rest of its budget."""

    enabled: bool = True
    divergence_factor: float = Field(
        10.0,
        gt=1.0,
        le=1e12,
        description="Loss above this many times the lowest of its first five logged values.",
    )
    min_loss_scale: float = Field(
        1.0, ge=0.0, description="fp16's loss scale below this: the scaler has collapsed."
    )
    prune_on_fallback: bool = Field(
        True,
        description="A precision or AllReduce fallback ends the trial (it no longer "
        "measures the precision it was asked to).",
    )


class Budget(_Strict):
    max_trials: int = Field(ge=1, le=MAX_TRIALS)
    max_concurrent: int = Field(2, ge=1, le=64)
    max_slot_hours: float | None = Field(
        None,
        gt=0,
        le=10**6,
        description="Once its trials held this many, the running ones are cancelled (reason "
        "sweep_budget) and the sweep ends.",
    )


class SweepSpec(_Strict):
    name: SafeName | None = None
    project: ProjectName = "default"
    base: JobSpec = Field(description="Every trial's job spec before the parameters apply.")
    space: dict[ParameterName, Dimension] = Field(min_length=1, max_length=MAX_DIMENSIONS)
    objectives: list[Objective] = Field(min_length=1, max_length=4)
    sampler: Sampler = Field(default_factory=Sampler)
    pruner: Pruner = Field(default_factory=Pruner)
    numerics: Numerics = Field(default_factory=Numerics)
    budget: Budget
    priority: Priority = Priority.NORMAL
    start_with: list[dict[ParameterName, Choice]] = Field(
        default_factory=list,
        max_length=16,
        description="Points to try first, in order (e.g. the defaults, as a baseline); each "
        "names every parameter of the space.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> SweepSpec:
        _check_space(self.space)
        if len(self.objectives) > 1 and self.pruner.type is not PrunerKind.NONE:
            raise ValueError(
                "pruner: Optuna's pruners stop single-objective trials only; with several "
                "objectives use pruner none (the numerics pruner still applies)"
            )
        if self.sampler.type is SamplerKind.GRID:
            _check_grid(self.space)
        if self.pruner.type is not PrunerKind.NONE and self.base.stop.max_steps is None:
            raise ValueError("pruner: give the base's stop.max_steps (its resource)")
        if self.pruner.type is not PrunerKind.NONE and self.pruner_metric in PLATFORM_MEASURES:
            raise ValueError(
                f"pruner: {self.pruner_metric} is known only once a trial ends; give "
                "pruner.metric, a metric the trial reports as it trains"
            )
        for index, point in enumerate(self.start_with):
            problem = _outside(self.space, point)
            if problem:
                raise ValueError(f"start_with[{index}]: {problem}")
        metrics = [o.metric for o in self.objectives]
        if len(set(metrics)) != len(metrics):
            raise ValueError("objectives: each metric at most once")
        return self

    @property
    def pruner_metric(self) -> str:
        return self.pruner.metric or self.objectives[0].metric


def _check_space(space: dict[str, Any]) -> None:
    for name, dimension in space.items():
        if "." in name and name not in PLATFORM_FIELDS:
            raise ValueError(
                f"space: {name!r} names no platform field; those are "
                f"{', '.join(PLATFORM_FIELDS)}, any other name must be a hyperparameter "
                "without dots"
            )
        if name in PLATFORM_FIELDS and not isinstance(dimension, Categorical | IntRange):
            raise ValueError(f"space: {name!r} is a platform field: give its choices")


def _check_grid(space: dict[str, Any]) -> None:
    points = 1
    for name, dimension in space.items():
        if not isinstance(dimension, Categorical | IntRange):
            raise ValueError(f"space: grid search needs choices or int ranges ({name})")
        points *= len(dimension.choices) if isinstance(dimension, Categorical) else dimension.count
    if points > 100_000:
        raise ValueError(f"space: a grid of {points} points; at most 100000")


def _outside(space: dict[str, Any], point: dict[str, Any]) -> str | None:
    if set(point) != set(space):
        return f"names {sorted(point)}, the space {sorted(space)}"
    for name, value in point.items():
        dimension = space[name]
        if isinstance(dimension, Categorical):
            if value not in dimension.choices:
                return f"{name}={value!r} is none of its choices"
        elif isinstance(value, bool) or not isinstance(value, int | float):
            return f"{name}={value!r} is not a number"
        elif not dimension.low <= value <= dimension.high:
            return f"{name}={value} is outside [{dimension.low}, {dimension.high}]"
        elif isinstance(dimension, IntRange) and (
            not float(value).is_integer() or (int(value) - dimension.low) % dimension.step
        ):
            return f"{name}={value} is not on its int range's steps"
    return None


def apply_params(base: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """A trial's job spec (as JSON): the base with each parameter set where it belongs."""
    spec = {**base, "hyperparameters": dict(base.get("hyperparameters", {}))}
    for name, value in params.items():
        path = PLATFORM_FIELDS.get(name)
        if path is None:
            spec["hyperparameters"][name] = value
            continue
        target = spec
        for key in path[:-1]:
            target[key] = dict(target.get(key) or {})
            target = target[key]
        target[path[-1]] = value
    return spec


def corner_points(spec: SweepSpec) -> list[dict[str, Any]]:
    """Parameter sets that touch every platform choice and both ends of every range: what
    the API checks for admission before accepting a sweep (a trial that could never fit the
    fleet is refused up front, not found out one trial at a time)."""
    low = {name: _end(d, first=True) for name, d in spec.space.items()}
    high = {name: _end(d, first=False) for name, d in spec.space.items()}
    points = [low, high]
    for name, dimension in spec.space.items():
        if name in PLATFORM_FIELDS and isinstance(dimension, Categorical):
            points.extend({**low, name: choice} for choice in dimension.choices)
    return points


def _end(dimension: Uniform | LogUniform | IntRange | Categorical, *, first: bool) -> Any:
    if isinstance(dimension, Categorical):
        return dimension.choices[0 if first else -1]
    if isinstance(dimension, IntRange):
        return dimension.low if first else dimension.top
    return dimension.low if first else dimension.high
