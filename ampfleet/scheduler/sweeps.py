"""The sweep controller: a step of every scheduler pass, before placement, so the trials it
asks for are placed in the same pass.

Per active sweep, in one savepoint: the running trials are followed (sweep_trials.py: their
metric points told to the pruner, a trial to prune cancelled, a trial whose job ended given
its objective values); a sweep whose trials have held `max_slot_hours` has its running trials
cancelled (reason `sweep_budget`); then new trials are asked for, up to the sweep's
concurrency and budget, each inserted with its job (core/job_creation.py: the admission rules
every job passes). (sweep, number) is unique and numbers are the count of trials before, so
a pass that is repeated after a crash before its commit asks the same trial again, and one
that raced another scheduler fails its insert instead of running it twice. Each of these
steps is a sweep event (core/sweep_events.py), written in the same savepoint.
"""

from __future__ import annotations

import logging
from datetime import datetime

from pydantic import ValidationError
from sqlalchemy import or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ampfleet.core import job_creation
from ampfleet.core import sweep_events as events
from ampfleet.core.custom_code import custom_code_allowed, custom_code_refusal
from ampfleet.core.models import Bundle, Job, Sweep, SweepTrial
from ampfleet.core.spec import CodeSpec, JobSpec
from ampfleet.core.sweep_spec import SweepSpec, SweepState, TrialState, apply_params
from ampfleet.scheduler import sweep_study, sweep_trials

log = logging.getLogger(__name__)
BUDGET_CANCEL = "sweep_budget"
"""The reason of a trial's job cancelled because its sweep's slot-hours were spent."""


class SweepRefusedError(Exception):
    """What no trial of the sweep can be admitted for any more (its project no longer runs
    custom code, its bundle is gone): the sweep ends rather than fail trial after trial."""


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
            sweep_trials.follow(session, sweep, spec, study, trial, jobs[str(trial.job_id)], now)
        session.flush()
    sweep_trials.settle(session, trials, jobs)
    if sweep.state != SweepState.RUNNING:
        return 0
    spent_s = _slot_seconds(session, spec, trials, jobs)
    if _slot_hours_spent(spec, spent_s):
        _cancel_for_budget(session, sweep, spec, trials, jobs, now)
    started = _ask(session, sweep, spec, trials, jobs, spent_s, now)
    _maybe_finish(session, sweep, spec, trials, spent_s, now)
    return started


# -- the budget ---------------------------------------------------------------------------


def _trial_cap(spec: SweepSpec) -> int:
    grid = sweep_study.grid_size(spec)
    return min(spec.budget.max_trials, grid) if grid else spec.budget.max_trials


def _slot_seconds(
    session: Session, spec: SweepSpec, trials: list[SweepTrial], jobs: dict[str, Job]
) -> float | None:
    """What its trials held so far; None where the sweep has no slot-hours budget."""
    if spec.budget.max_slot_hours is None:
        return None
    return sweep_trials.slot_seconds(session, trials, jobs)


def _slot_hours_spent(spec: SweepSpec, spent_s: float | None) -> bool:
    limit = spec.budget.max_slot_hours
    return limit is not None and spent_s is not None and spent_s >= limit * 3600


def _budget_spent(spec: SweepSpec, trials: list[SweepTrial], spent_s: float | None) -> str | None:
    """Which budget is spent, in words; None while there is room for another trial."""
    if len(trials) >= _trial_cap(spec):
        return "its trial budget spent"
    if _slot_hours_spent(spec, spent_s):
        return f"{BUDGET_CANCEL}: its {spec.budget.max_slot_hours:g} slot-hours spent"
    return None


def _cancel_for_budget(
    session: Session,
    sweep: Sweep,
    spec: SweepSpec,
    trials: list[SweepTrial],
    jobs: dict[str, Job],
    now: datetime,
) -> None:
    reason = f"{BUDGET_CANCEL}: the sweep's {spec.budget.max_slot_hours:g} slot-hours are spent"
    for trial in trials:
        if trial.state == TrialState.RUNNING and trial.job_id in jobs:
            job = jobs[str(trial.job_id)]
            sweep_trials.stop(
                session, sweep, trial, job, TrialState.CANCELLED, BUDGET_CANCEL, reason, now
            )


# -- asking for new trials ---------------------------------------------------------------


def _ask(
    session: Session,
    sweep: Sweep,
    spec: SweepSpec,
    trials: list[SweepTrial],
    jobs: dict[str, Job],
    spent_s: float | None,
    now: datetime,
) -> int:
    """New trials up to its concurrency; at most that many a pass, so that a space whose
    trials are refused one after another does not spin through the whole budget at once."""
    started = 0
    for _ in range(spec.budget.max_concurrent):
        running = sum(1 for t in trials if t.state == TrialState.RUNNING)
        if running >= spec.budget.max_concurrent or _budget_spent(spec, trials, spent_s):
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
        except SweepRefusedError as refusal:
            _end(session, sweep, trials, SweepState.FAILED, f"not admitted: {refusal}", now)
            break
        except job_creation.AdmissionRefusedError as refusal:
            if refusal.kind == "quota":
                log.info("sweep %s waits: %s", sweep.id, refusal.message)
                break  # nothing written: the same trial is asked again on a later pass
            field = f"{refusal.field}: " if refusal.field else ""
            trial.state, trial.reason = TrialState.FAILED, f"not admitted: {field}{refusal}"
            trial.finished_at, job = now, None
        try:
            with session.begin_nested():
                if job is not None:
                    session.add(job)
                    session.flush()
                    message = f"trial {trial.number} of sweep {sweep.id}: "
                    message += events.describe_params(trial.params)
                    job_creation.record_submitted(
                        session, job, JobSpec.model_validate(job.spec), message
                    )
                trial.job_id = job.id if job is not None else None
                session.add(trial)
                session.flush()
                if job is not None:
                    events.trial_started(session, sweep, trial, now)
                else:
                    events.trial_ended(session, sweep, trial, now)
        except IntegrityError:
            log.warning("sweep %s: trial %d exists already", sweep.id, trial.number)
            break
        trials.append(trial)
        if job is not None:
            jobs[job.id] = job
            started += 1
    return started


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
    if job_spec.code is not None:
        resolved["code"]["sha256"] = _bundle(session, sweep.project, job_spec.code).sha256
    listed = sweep.base_resolved.get("listed_inputs")
    if listed is not None:  # read at the sweep's submit
        job_creation.check_listed_inputs(job_spec, resolved, job_creation.listed_from_json(listed))
    job_creation.admit(session, job_spec, resolved)
    return job_creation.new_job(
        job_spec,
        resolved,
        recipe=job_creation.recipe_of(job_spec),
        idempotency_key=f"sweep-{sweep.id}-trial-{trial.number}",
        request_hash=None,
        sweep_id=sweep.id,
        trial=trial.number,
    )


def _bundle(session: Session, project: str, code: CodeSpec) -> Bundle:
    """The base's bundle, where its project still runs custom code (checked again for each
    trial: an admin may have turned it off since the sweep was accepted)."""
    if not custom_code_allowed(session, project):
        raise SweepRefusedError(custom_code_refusal(project))
    bundle = session.get(Bundle, code.bundle)
    if bundle is None or bundle.project != project:
        raise SweepRefusedError(f"bundle {code.bundle} is no longer in project {project}")
    return bundle


# -- the end -----------------------------------------------------------------------------


def _maybe_finish(
    session: Session,
    sweep: Sweep,
    spec: SweepSpec,
    trials: list[SweepTrial],
    spent_s: float | None,
    now: datetime,
) -> None:
    if sweep.state != SweepState.RUNNING or any(t.state == TrialState.RUNNING for t in trials):
        return
    spent = _budget_spent(spec, trials, spent_s)
    if spent is None:
        return  # waiting for room in its project's queue
    complete = sum(1 for t in trials if t.state == TrialState.COMPLETE)
    if complete:
        _end(session, sweep, trials, SweepState.SUCCEEDED, f"{spent}; {complete} complete", now)
    else:
        _end(session, sweep, trials, SweepState.FAILED, f"{spent}; no trial completed", now)


def _end(
    session: Session,
    sweep: Sweep,
    trials: list[SweepTrial],
    state: SweepState,
    reason: str,
    now: datetime,
) -> None:
    sweep.state, sweep.reason, sweep.finished_at = state, reason, now
    counts: dict[str, int] = {}
    for trial in trials:
        counts[trial.state] = counts.get(trial.state, 0) + 1
    events.sweep_ended(session, sweep, counts, now)
