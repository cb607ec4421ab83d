"""Rules of the sweeps resource: admission of the search as a whole, listing, cancel. The
trials themselves are asked for and admitted by the scheduler's controller
(scheduler/sweeps.py) through the same job-creation rules as POST /v1/jobs. Flushes, never
commits."""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from ampfleet.api.auth import Principal, ProjectScope
from ampfleet.api.errors import ConflictError, NotFoundError, UnprocessableError
from ampfleet.api.jobs import service as jobs
from ampfleet.api.jobs.init_from import resolve_init_from
from ampfleet.api.jobs.inputs import listed_inputs, resolve_inputs
from ampfleet.api.jobs.node_shapes import recent_node_shapes
from ampfleet.api.pagination import decode_cursor, encode_cursor
from ampfleet.api.sweeps import repository, results
from ampfleet.api.sweeps.schemas import (
    PrecisionRow,
    SweepEventList,
    SweepEventOut,
    SweepOut,
    SweepPage,
    SweepSummary,
    TrialOut,
)
from ampfleet.core import goodput, job_creation, sweep_events
from ampfleet.core.cancelling import request_cancel
from ampfleet.core.ids import new_id
from ampfleet.core.models import Project, Sweep, SweepTrial, utcnow
from ampfleet.core.spec import JobSpec
from ampfleet.core.sweep_spec import SweepSpec, SweepState, TrialState, apply_params, corner_points

SWEEP_ID = re.compile(r"swp_[0-9a-z]{26}")


def create(session: Session, spec: SweepSpec) -> Sweep:
    """Refused as a whole when its base, or any corner of its space, could never run as a
    job (422 naming the field), or when its project's queue is full (429); its trials are
    then admitted one at a time as the controller asks for them."""
    base = spec.base.model_copy(update={"project": spec.project, "priority": spec.priority})
    resolved = jobs.resolve(base)
    if base.code is not None:  # checked again for each trial (scheduler/sweeps.py)
        bundle = jobs.code_bundle(session, spec.project, base.code)
        if base.code.command is not None:
            jobs.check_script_in(bundle, base.code.command)
    resolved["inputs"] = resolve_inputs(session, spec.project, base.inputs)
    listed = listed_inputs(session, resolved["inputs"])
    resolved["init_from"] = resolve_init_from(session, base)
    _check_concurrency(session, spec)
    nodes = recent_node_shapes.refresh(session)  # read once for every corner
    raw_base = base.model_dump(mode="json", exclude_unset=True)
    for point in corner_points(spec):
        trial = _trial_spec(raw_base, point)
        trial_resolved = {**jobs.resolve(trial), "inputs": resolved["inputs"]}
        jobs.check_listed_inputs(trial, trial_resolved, listed)
        try:
            job_creation.check_fits(session, trial, trial_resolved, nodes)
        except job_creation.AdmissionRefusedError as refusal:
            raise jobs.http_refusal(refusal) from None
    try:
        job_creation.check_queue_quota(session, spec.project)
    except job_creation.AdmissionRefusedError as refusal:
        raise jobs.http_refusal(refusal) from None
    sweep = Sweep(
        id=new_id("swp"),
        project=spec.project,
        name=spec.name,
        spec=spec.model_dump(mode="json"),
        base_resolved={
            "inputs": resolved["inputs"],
            "init_from": resolved["init_from"],
            "listed_inputs": job_creation.listed_to_json(listed),
        },
        state=SweepState.RUNNING.value,
    )
    session.add(sweep)
    session.flush()
    return sweep


def _trial_spec(raw_base: dict[str, Any], point: dict[str, Any]) -> JobSpec:
    try:
        return JobSpec.model_validate(apply_params(raw_base, point))
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(part) for part in error["loc"])
        names = ", ".join(f"{k}={v}" for k, v in point.items())
        raise UnprocessableError.for_field(
            "space", f"a trial with {names} is no valid job: {field}: {error['msg']}"
        ) from None


def _check_concurrency(session: Session, spec: SweepSpec) -> None:
    project = session.get(Project, spec.project)
    if project is None or project.max_running_jobs is None:
        return
    if spec.budget.max_concurrent > project.max_running_jobs:
        raise UnprocessableError.for_field(
            "budget.max_concurrent",
            f"{spec.budget.max_concurrent} concurrent trials, but project {spec.project} may "
            f"run {project.max_running_jobs} jobs at once",
        )


def get(session: Session, sweep_id: str, principal: Principal) -> Sweep:
    sweep = repository.get(session, sweep_id)
    if sweep is None:
        raise NotFoundError(f"sweep {sweep_id} not found")
    principal.check_visible(sweep.project, f"sweep {sweep_id}")
    return sweep


def cancel(session: Session, sweep_id: str, principal: Principal) -> Sweep:
    """No new trial; every trial not yet ended is cancelled as any job is."""
    sweep = get(session, sweep_id, principal)
    principal.check_can_write(sweep.project)
    if SweepState(sweep.state).is_terminal():
        raise ConflictError(f"sweep {sweep_id} is already {sweep.state}")
    now = utcnow()
    sweep.state, sweep.reason, sweep.finished_at = SweepState.CANCELLED, "cancelled", now
    for job_id in repository.unfinished_jobs(session, sweep_id):
        request_cancel(session, job_id, reason="sweep_cancelled", message=f"sweep {sweep_id}")
    counts = repository.counts(session, [sweep_id])[sweep_id]
    sweep_events.sweep_ended(session, sweep, counts, now)
    session.flush()
    return sweep


def events(session: Session, sweep_id: str, after: int, limit: int) -> SweepEventList:
    rows = repository.events(session, sweep_id, after, limit)
    return SweepEventList(
        items=[SweepEventOut.model_validate(e, from_attributes=True) for e in rows],
        next_after=rows[-1].id if len(rows) == limit else None,
    )


def page(session: Session, scope: ProjectScope, *, cursor: str | None, limit: int) -> SweepPage:
    sweeps = repository.page(
        session,
        scope,
        before_id=decode_cursor(cursor, _sweep_id) if cursor else None,
        limit=limit + 1,
    )
    more = len(sweeps) > limit
    shown = sweeps[:limit]
    counts = repository.counts(session, [s.id for s in shown])
    return SweepPage(
        items=[
            SweepSummary(
                id=s.id,
                name=s.name,
                project=s.project,
                state=SweepState(s.state),
                reason=s.reason,
                counts=counts[s.id],
                created_at=s.created_at,
                finished_at=s.finished_at,
            )
            for s in shown
        ],
        next_cursor=encode_cursor(sweeps[limit - 1].id.encode()) if more else None,
    )


def _sweep_id(payload: bytes) -> str | None:
    sweep_id = payload.decode("ascii")
    return sweep_id if SWEEP_ID.fullmatch(sweep_id) else None


def detail(session: Session, sweep: Sweep) -> SweepOut:
    spec = SweepSpec.model_validate(sweep.spec)
    trials = repository.trials(session, sweep.id)
    counts: dict[str, int] = {}
    for trial in trials:
        counts[trial.state] = counts.get(trial.state, 0) + 1
    _settle_slot_seconds(session, trials)
    top = results.best(trials, spec.objectives) if len(spec.objectives) == 1 else None
    slot_s = {
        "total": sum(float(t.measures.get("slot_s") or 0) for t in trials),
        "pruned": sum(
            float(t.measures.get("slot_s") or 0) for t in trials if t.state == TrialState.PRUNED
        ),
    }
    return SweepOut(
        id=sweep.id,
        name=sweep.name,
        project=sweep.project,
        state=SweepState(sweep.state),
        reason=sweep.reason,
        spec=sweep.spec,
        counts=counts,
        best_trial=trial_out(top) if top else None,
        pareto_front=[trial_out(t) for t in results.pareto_front(trials, spec.objectives)],
        precision_report=[
            PrecisionRow.model_validate(row)
            for row in results.precision_report(trials, spec.objectives)
        ],
        slot_s=slot_s,
        trials=[trial_out(t) for t in trials],
        created_at=sweep.created_at,
        updated_at=sweep.updated_at,
        finished_at=sweep.finished_at,
    )


def _settle_slot_seconds(session: Session, trials: list[SweepTrial]) -> None:
    """The slot-seconds of each trial not measured since its job ended, as its job's goodput
    says now (not stored): one still running, or pruned while its ranks still stop. Read in
    one go; each row is expunged first, so the figure is never written back."""
    going = [t for t in trials if t.job_id and not t.measures_final]
    jobs = repository.jobs(session, [str(t.job_id) for t in going])
    held = goodput.of_jobs(session, jobs)
    for trial in going:
        if trial.job_id in held:
            session.expunge(trial)
            slot_s = round(held[str(trial.job_id)].allocated_slot_s, 3)
            trial.measures = {**trial.measures, "slot_s": slot_s}


def trial_out(trial: SweepTrial) -> TrialOut:
    return TrialOut(
        number=trial.number,
        job_id=trial.job_id,
        state=TrialState(trial.state),
        params=trial.params,
        values=trial.values,
        reason=trial.reason,
        measures=trial.measures,
        intermediate={str(k): float(v) for k, v in trial.intermediate.items()},
        created_at=trial.created_at,
        finished_at=trial.finished_at,
    )
