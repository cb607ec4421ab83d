"""The sweep controller: a step of every scheduler pass, before placement, so the trials it
asks for are placed in the same pass.

Per active sweep, in one savepoint: the running trials' new metric points are told to the
study (Optuna's pruner decides; the numerics pruner, sweep_numerics.py, has the first word),
a trial to prune is cancelled through `request_cancel` with reason `pruned`, a trial whose
job ended gets its objective values; then new trials are asked for, up to the sweep's
concurrency and budget, each inserted with its job (core/job_creation.py: the admission
rules every job passes). (sweep, number) is unique and numbers are the count of trials
before, so a pass that is repeated after a crash before its commit asks the same trial
again, and one that raced another scheduler fails its insert instead of running it twice.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy import or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ampfleet.core import goodput, job_creation
from ampfleet.core.cancelling import request_cancel
from ampfleet.core.models import Job, Metric, Sweep, SweepTrial
from ampfleet.core.spec import JobSpec
from ampfleet.core.states import JobState
from ampfleet.core.sweep_spec import (
    PrunerKind,
    SweepSpec,
    SweepState,
    TrialState,
    apply_params,
)
from ampfleet.scheduler import sweep_study
from ampfleet.scheduler.sweep_numerics import numerics_problem

log = logging.getLogger(__name__)


def advance_sweeps(session: Session, now: datetime) -> int:
    """Runs the controller over every sweep that is running or still has running trials;
    the number of trials it started. A sweep that breaks is logged and left as it was: it
    must not stop the pass from placing everyone else's jobs."""
    running_trials = select(SweepTrial.sweep_id).where(SweepTrial.state == TrialState.RUNNING)
    sweeps = session.scalars(
        select(Sweep)
        .where(or_(Sweep.state == SweepState.RUNNING, Sweep.id.in_(running_trials)))
        .order_by(Sweep.id)
    ).all()
    started = 0
    for sweep in sweeps:
        try:
            with session.begin_nested():
                started += _advance(session, sweep, now)
        except Exception:
            log.exception("sweep %s: controller step failed; retrying on the next pass", sweep.id)
    return started


def _advance(session: Session, sweep: Sweep, now: datetime) -> int:
    # The sweep's row lock: a cancel committed meanwhile is seen here, and one that comes
    # later waits for this pass's trials, which it then cancels too.
    session.refresh(sweep, with_for_update=True)
    spec = SweepSpec.model_validate(sweep.spec)
    trials = list(
        session.scalars(
            select(SweepTrial).where(SweepTrial.sweep_id == sweep.id).order_by(SweepTrial.number)
        )
    )
    jobs = {job.id: job for job in session.scalars(select(Job).where(Job.sweep_id == sweep.id))}
    running = [t for t in trials if t.state == TrialState.RUNNING and t.job_id in jobs]
    if running:
        study = sweep_study.build(sweep.id, spec, trials)
        for trial in running:
            _follow(session, spec, study, trial, jobs[str(trial.job_id)], now)
        session.flush()
    if sweep.state != SweepState.RUNNING:
        return 0
    started = _ask(session, sweep, spec, trials, jobs)
    _maybe_finish(session, sweep, spec, trials, jobs, now)
    return started


# -- following running trials ------------------------------------------------------------


def _follow(
    session: Session, spec: SweepSpec, study: Any, trial: SweepTrial, job: Job, now: datetime
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
        return
    if state is JobState.CANCELLING:
        return  # asked to stop (the sweep was cancelled): its end is recorded when it comes
    if problem is not None:
        _prune(session, trial, job, problem, now)
    elif prune and spec.pruner.type is not PrunerKind.NONE:
        step = max(int(s) for s in trial.intermediate)
        value = trial.intermediate[str(step)]
        _prune(
            session,
            trial,
            job,
            f"{spec.pruner.type.value}: {spec.pruner_metric} {value:.4g} at step {step} "
            "is not among the trials promoted at this rung",
            now,
        )


def _new_points(
    session: Session, job_id: str, metric: str, told: dict[str, Any]
) -> list[tuple[int, float]]:
    """The metric's points by step past the last one told to the pruner (the newest value
    of a step reported again after a restart)."""
    last = max((int(step) for step in told), default=-1)
    by_step: dict[int, float] = {}
    rows = session.execute(
        select(Metric.step, Metric.value)
        .where(Metric.job_id == job_id, Metric.name == metric, Metric.step > last)
        .order_by(Metric.id)
    )
    for step, value in rows:
        by_step[step] = value
    return sorted(by_step.items())


def _prune(session: Session, trial: SweepTrial, job: Job, reason: str, now: datetime) -> None:
    moved = request_cancel(session, job.id, reason="pruned", message=reason)
    if moved is None:
        return  # it ended meanwhile: the next pass records how
    trial.state, trial.reason, trial.finished_at = TrialState.PRUNED, reason, now
    trial.measures = _measures(session, job)


def _finish(
    session: Session,
    spec: SweepSpec,
    trial: SweepTrial,
    job: Job,
    problem: str | None,
    now: datetime,
) -> None:
    trial.finished_at, trial.measures = now, _measures(session, job)
    state = JobState(job.state)
    if state is JobState.SUCCEEDED:
        values, missing = _objective_values(session, spec, job.id)
        if missing:
            trial.state, trial.reason = TrialState.FAILED, f"reported no {missing}"
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


def _objective_values(
    session: Session, spec: SweepSpec, job_id: str
) -> tuple[list[float], str | None]:
    values: list[float] = []
    for objective in spec.objectives:
        points = _points(session, job_id, objective.metric)
        if not points:
            return [], objective.metric
        series = [value for _, value in points]
        if objective.reduce == "last":
            values.append(series[-1])
        elif objective.reduce == "mean":
            values.append(sum(series) / len(series))
        else:
            values.append(max(series) if objective.direction == "maximize" else min(series))
    return values, None


def _points(session: Session, job_id: str, metric: str) -> list[tuple[int, float]]:
    by_step: dict[int, float] = {}
    rows = session.execute(
        select(Metric.step, Metric.value)
        .where(Metric.job_id == job_id, Metric.name == metric)
        .order_by(Metric.id)
    )
    for step, value in rows:
        by_step[step] = value
    return sorted(by_step.items())


def _measures(session: Session, job: Job) -> dict[str, Any]:
    """What the platform measured of the trial, for the precision report."""
    speeds = [value for _, value in _points(session, job.id, "samples_per_s")]
    return {
        "samples_per_s": sum(speeds) / len(speeds) if speeds else None,
        "slot_s": round(goodput.of_job(session, job).allocated_slot_s, 3),
        "precision": job.precision or job.resolved.get("precision"),
        "allreduce_dtype": job.allreduce_dtype or job.resolved.get("allreduce_dtype"),
        "steps": job.step,
    }


# -- asking for new trials ---------------------------------------------------------------


def _trial_cap(spec: SweepSpec) -> int:
    grid = sweep_study.grid_size(spec)
    return min(spec.budget.max_trials, grid) if grid else spec.budget.max_trials


def slot_seconds(session: Session, trials: list[SweepTrial], jobs: dict[str, Job]) -> float:
    """Slot-seconds the sweep's trials held: ended ones as measured, running ones so far."""
    total = 0.0
    for trial in trials:
        if trial.state != TrialState.RUNNING:
            total += float(trial.measures.get("slot_s") or 0.0)
        elif trial.job_id in jobs:
            total += goodput.of_job(session, jobs[str(trial.job_id)]).allocated_slot_s
    return total


def _budget_left(
    session: Session, spec: SweepSpec, trials: list[SweepTrial], jobs: dict[str, Job]
) -> bool:
    if len(trials) >= _trial_cap(spec):
        return False
    limit = spec.budget.max_slot_hours
    return limit is None or slot_seconds(session, trials, jobs) < limit * 3600


def _ask(
    session: Session,
    sweep: Sweep,
    spec: SweepSpec,
    trials: list[SweepTrial],
    jobs: dict[str, Job],
) -> int:
    started = 0
    while _budget_left(session, spec, trials, jobs):
        running = sum(1 for t in trials if t.state == TrialState.RUNNING)
        if running >= spec.budget.max_concurrent:
            break
        study = sweep_study.build(sweep.id, spec, trials)
        params, dists, attrs = sweep_study.ask(study, spec)
        trial = SweepTrial(
            sweep_id=sweep.id,
            number=len(trials),
            state=TrialState.RUNNING,
            params=params,
            distributions=dists,
            system_attrs=attrs,
            intermediate={},
            measures={},
        )
        try:
            job = _trial_job(session, sweep, spec, trial)
        except job_creation.AdmissionRefusedError as refusal:
            if refusal.kind == "quota":
                log.info("sweep %s waits: %s", sweep.id, refusal.message)
                break  # nothing written: the same trial is asked again on a later pass
            trial.state, trial.reason = TrialState.FAILED, f"not admitted: {refusal.message}"
            job = None
        try:
            with session.begin_nested():
                if job is not None:
                    session.add(job)
                    session.flush()
                    job_creation.record_submitted(
                        session, job, JobSpec.model_validate(job.spec), _describe(trial)
                    )
                trial.job_id = job.id if job is not None else None
                session.add(trial)
                session.flush()
        except IntegrityError:
            log.warning("sweep %s: trial %d exists already", sweep.id, trial.number)
            break
        trials.append(trial)
        if job is not None:
            jobs[job.id] = job
            started += 1
    return started


def _describe(trial: SweepTrial) -> str:
    params = ", ".join(f"{k}={_short(v)}" for k, v in trial.params.items())
    return f"trial {trial.number} of sweep {trial.sweep_id}: {params}"


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _trial_job(session: Session, sweep: Sweep, spec: SweepSpec, trial: SweepTrial) -> Job:
    """The trial's QUEUED job, admitted by the rules every job passes."""
    base = spec.base.model_dump(mode="json", exclude_unset=True)
    labels = {**base.get("labels", {}), "sweep": sweep.id, "trial": str(trial.number)}
    raw = {
        **apply_params(base, trial.params),
        "project": sweep.project,
        "priority": spec.priority.value,
        "labels": labels,
        "name": f"{sweep.name or sweep.id}-trial-{trial.number}"[:128],
    }
    try:
        job_spec = JobSpec.model_validate(raw)
    except ValidationError as exc:
        raise job_creation.AdmissionRefusedError(str(exc.errors()[0]["msg"])) from None
    resolved = job_creation.resolve_recipe(job_spec)
    for key in ("inputs", "init_from"):
        resolved[key] = sweep.base_resolved.get(key)
    job_creation.admit(session, job_spec, resolved)
    return job_creation.new_job(
        job_spec,
        resolved,
        recipe=str(job_spec.recipe),
        idempotency_key=f"sweep-{sweep.id}-trial-{trial.number}",
        request_hash=None,
        sweep_id=sweep.id,
        trial=trial.number,
    )


def _maybe_finish(
    session: Session,
    sweep: Sweep,
    spec: SweepSpec,
    trials: list[SweepTrial],
    jobs: dict[str, Job],
    now: datetime,
) -> None:
    if any(t.state == TrialState.RUNNING for t in trials):
        return
    if _budget_left(session, spec, trials, jobs):
        return  # waiting for room in its project's queue
    complete = sum(1 for t in trials if t.state == TrialState.COMPLETE)
    spent = "its trial budget" if len(trials) >= _trial_cap(spec) else "its slot-hours"
    if complete:
        sweep.state, sweep.reason = SweepState.SUCCEEDED, f"{spent} spent; {complete} complete"
    else:
        sweep.state, sweep.reason = SweepState.FAILED, f"{spent} spent; no trial completed"
    sweep.finished_at = now
