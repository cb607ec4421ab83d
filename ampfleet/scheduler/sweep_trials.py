"""Following a sweep's trials, for the controller (scheduler/sweeps.py): the running trials'
new metric points told to the study (the numerics pruner, sweep_numerics.py, has the first
word; Optuna's pruner the second), a trial to prune cancelled through `request_cancel` with
reason `pruned`, a trial whose job ended given its objective values; and what the platform
measured of each (throughput, slot-seconds, the effective precision).

A trial's measures are `final` once measured after its job ended: a pruned trial is measured
when it is pruned, while its ranks still stop, and measured again once they have, so that
what the sweep's trials held is read from the trial rows and only the few jobs still going
are read from their goodput (what `max_slot_hours` is checked against every pass).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ampfleet.core import goodput
from ampfleet.core import sweep_events as events
from ampfleet.core.cancelling import request_cancel
from ampfleet.core.goodput import Goodput
from ampfleet.core.models import Job, Metric, Sweep, SweepTrial
from ampfleet.core.states import JobState
from ampfleet.core.sweep_spec import (
    SLOT_SECONDS,
    SLOT_SECONDS_PER_QUALITY,
    Objective,
    PrunerKind,
    SweepSpec,
    TrialState,
)
from ampfleet.scheduler import sweep_study
from ampfleet.scheduler.sweep_numerics import numerics_problem

SAMPLES_PER_S = "samples_per_s"


def follow(
    session: Session,
    sweep: Sweep,
    spec: SweepSpec,
    study: Any,
    trial: SweepTrial,
    job: Job,
    now: datetime,
) -> None:
    points = _new_points(session, job.id, spec.pruner_metric, trial.intermediate)
    prune = False
    if points and len(spec.objectives) == 1:
        prune = sweep_study.report(study, trial.number, points)
        trial.intermediate = {**trial.intermediate, **{str(s): v for s, v in points}}
        trial.system_attrs = sweep_study.attrs_of(study, trial.number)
    problem = numerics_problem(session, job, spec.numerics)
    state = JobState(job.state)
    if state.is_terminal():
        _finish(session, spec, trial, job, problem, now)
        events.trial_ended(session, sweep, trial, now)
        return
    if state is JobState.CANCELLING:
        return  # asked to stop (the sweep was cancelled): its end is recorded when it comes
    if problem is not None:
        stop(session, sweep, trial, job, TrialState.PRUNED, "pruned", problem, now)
    elif prune and spec.pruner.type is not PrunerKind.NONE:
        step = max(int(s) for s in trial.intermediate)
        value = trial.intermediate[str(step)]
        reason = (
            f"{spec.pruner.type.value}: {spec.pruner_metric} {value:.4g} at step {step} "
            "is not among the trials promoted at this rung"
        )
        stop(session, sweep, trial, job, TrialState.PRUNED, "pruned", reason, now)


def stop(
    session: Session,
    sweep: Sweep,
    trial: SweepTrial,
    job: Job,
    state: TrialState,
    cause: str,
    reason: str,
    now: datetime,
) -> None:
    """Ends a running trial as `state` and cancels its job (`cause` is the cancel's reason);
    a job that ended meanwhile is left for the next pass to record as it ended."""
    if request_cancel(session, job.id, reason=cause, message=reason) is None:
        return
    trial.state, trial.reason, trial.finished_at = state, reason, now
    series = _series(session, job.id, [SAMPLES_PER_S])
    trial.measures = measures(job, goodput.of_job(session, job), series)
    events.trial_ended(session, sweep, trial, now)


def _new_points(
    session: Session, job_id: str, metric: str, told: dict[str, Any]
) -> list[tuple[int, float]]:
    """The metric's points by step past the last one told to the pruner."""
    last = max((int(step) for step in told), default=-1)
    return _series(session, job_id, [metric], after_step=last)[metric]


Series = dict[str, list[tuple[int, float]]]


def _series(session: Session, job_id: str, names: Iterable[str], after_step: int = -1) -> Series:
    """The named metrics' points by step, in one read (the newest value of a step reported
    again after a restart)."""
    by_name: dict[str, dict[int, float]] = {name: {} for name in names}
    rows = session.execute(
        select(Metric.name, Metric.step, Metric.value)
        .where(Metric.job_id == job_id, Metric.name.in_(by_name), Metric.step > after_step)
        .order_by(Metric.id)
    )
    for name, step, value in rows:
        by_name[name][step] = value
    return {name: sorted(points.items()) for name, points in by_name.items()}


def _finish(
    session: Session,
    spec: SweepSpec,
    trial: SweepTrial,
    job: Job,
    problem: str | None,
    now: datetime,
) -> None:
    held = goodput.of_job(session, job)
    series = _series(session, job.id, {SAMPLES_PER_S, *_reported(spec.objectives)})
    trial.finished_at, trial.measures = now, measures(job, held, series)
    state = JobState(job.state)
    if state is JobState.SUCCEEDED:
        values, missing = objective_values(spec.objectives, series, held)
        if missing:
            trial.state, trial.reason = TrialState.FAILED, missing
        elif problem is not None:  # finished, but on numbers the sweep cannot trust
            trial.state, trial.reason = TrialState.PRUNED, problem
        else:
            trial.state, trial.values = TrialState.COMPLETE, values
        return
    if state is JobState.CANCELLED:
        trial.state, trial.reason = TrialState.CANCELLED, "its job was cancelled"
        return
    trial.state = TrialState.FAILED
    trial.reason = problem or f"its job {state.value}: {job.failure_reason or 'no reason'}"


def _reported(objectives: Sequence[Objective]) -> set[str]:
    """The metrics the trial reports that its objectives are computed from."""
    names = {o.quality or o.metric for o in objectives}
    return names - {SLOT_SECONDS, SLOT_SECONDS_PER_QUALITY}


def objective_values(
    objectives: Sequence[Objective], series: Series, held: Goodput
) -> tuple[list[float], str | None]:
    """One value per objective, or why there is none (a metric never reported, a quality
    that slot-seconds cannot be divided by)."""
    values: list[float] = []
    slot_s = round(held.allocated_slot_s, 3)  # as the trial's measures say
    for objective in objectives:
        if objective.metric == SLOT_SECONDS:
            values.append(slot_s)
            continue
        per_quality = objective.metric == SLOT_SECONDS_PER_QUALITY
        name = objective.quality if per_quality and objective.quality else objective.metric
        points = [value for _, value in series.get(name, [])]
        if not points:
            return [], f"reported no {name}"
        larger_is_better = per_quality or objective.direction == "maximize"
        value = _reduced(points, objective.reduce, larger_is_better)
        if per_quality:
            if not value > 0:
                return [], f"{name} was {value:.4g}: slot-seconds per unit of it need it above 0"
            value = slot_s / value
        values.append(value)
    return values, None


def _reduced(series: list[float], reduce: str, larger_is_better: bool) -> float:
    if reduce == "last":
        return series[-1]
    if reduce == "mean":
        return sum(series) / len(series)
    return max(series) if larger_is_better else min(series)


def measures(job: Job, held: Goodput, series: Series) -> dict[str, Any]:
    """What the platform measured of the trial, for the precision report."""
    speeds = [value for _, value in series.get(SAMPLES_PER_S, [])]
    return {
        "samples_per_s": sum(speeds) / len(speeds) if speeds else None,
        "slot_s": round(held.allocated_slot_s, 3),
        "precision": job.precision or job.resolved.get("precision"),
        "allreduce_dtype": job.allreduce_dtype or job.resolved.get("allreduce_dtype"),
        "steps": job.step,
        "final": JobState(job.state).is_terminal(),
    }


def settle(session: Session, trials: Sequence[SweepTrial], jobs: dict[str, Job]) -> None:
    """Measures again the ended trials whose jobs have ended since they were measured."""
    stale = [
        t
        for t in trials
        if t.state != TrialState.RUNNING
        and not t.measures_final
        and t.job_id in jobs
        and JobState(jobs[str(t.job_id)].state).is_terminal()
    ]
    held = goodput.of_jobs(session, [jobs[str(t.job_id)] for t in stale])
    for trial in stale:
        job = jobs[str(trial.job_id)]
        trial.measures = measures(job, held[job.id], _series(session, job.id, [SAMPLES_PER_S]))


def slot_seconds(session: Session, trials: Sequence[SweepTrial], jobs: dict[str, Job]) -> float:
    """Slot-seconds the sweep's trials held: as measured for those whose jobs ended, from
    the goodput of the rest (running, or still stopping) in one read."""
    going = [jobs[str(t.job_id)] for t in trials if not t.measures_final and t.job_id in jobs]
    held = goodput.of_jobs(session, going)
    measured = sum(float(t.measures.get("slot_s") or 0.0) for t in trials if t.measures_final)
    return measured + sum(g.allocated_slot_s for g in held.values())
