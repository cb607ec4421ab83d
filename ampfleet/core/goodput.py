"""Goodput: of the slot-seconds a job (or a project) held, how many went into training steps
that count, and where the rest went.

Two sources, because neither alone can tell it. Allocation rows say how long each attempt
held how many slots (placed to released). The attempt's own accounting (training/
accounting.py, stored in `attempt_usage`) says how much of that was training steps,
checkpoint stalls and evaluation, and up to which step. What is left over is start-up
(placed to the first step: launch, imports, data, rendezvous, restoring a checkpoint) and
"other" (the tail of an attempt that was killed or hung after its last report, teardown).
Steps recomputed are the step-seconds of an attempt past the checkpoint that the next
attempt resumed from (`kept_step_s`, settled when the next attempt starts), plus any a
precision fallback threw away inside one attempt.

A sweep's trial that its pruner stopped (core/sweep_spec.py, state `pruned`) trained a model
nobody keeps: all it held counts as `pruned`, whatever it was spent on, so a project sees
what its early stopping cost beside what it saved.

Queue time is reported apart, in wall seconds: while a job waits it holds no slot, so it
is lost time for the job, not slot-seconds lost by the fleet.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, select
from sqlalchemy.orm import Session

from ampfleet.core.accounting import step_seconds_up_to
from ampfleet.core.models import Allocation, AttemptUsage, Job, SweepTrial, utcnow
from ampfleet.core.sweep_spec import TrialState

ACCOUNTED = ("training", "startup", "recomputed", "checkpoint", "evaluation")
"""The kinds an attempt's own accounting tells apart."""
KINDS = (*ACCOUNTED, "pruned", "other")
"""Where allocated slot-seconds went; together they are the allocated ones."""


@dataclass
class Goodput:
    allocated_slot_s: float = 0.0
    training_slot_s: float = 0.0
    startup_slot_s: float = 0.0
    recomputed_slot_s: float = 0.0
    checkpoint_slot_s: float = 0.0
    evaluation_slot_s: float = 0.0
    pruned_slot_s: float = 0.0
    other_slot_s: float = 0.0
    queued_s: float = 0.0
    attempts: int = 0

    @property
    def ratio(self) -> float | None:
        """Training slot-seconds per allocated one; None before anything was allocated."""
        return self.training_slot_s / self.allocated_slot_s if self.allocated_slot_s else None

    def add(self, other: Goodput) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {f.name: round(getattr(self, f.name), 3) for f in fields(self)}
        out["ratio"] = None if self.ratio is None else round(self.ratio, 4)
        return out


# -- writing, from the ingest of rank 0's records -------------------------------------------


def record_usage(session: Session, job_id: str, attempt: int, record: dict[str, Any]) -> None:
    """An attempt's latest `usage` record; an older one (replayed) changes nothing."""
    row = session.get(AttemptUsage, (job_id, attempt))
    step = int(record["step"])
    if row is None:
        row = AttemptUsage(job_id=job_id, attempt=attempt, marks=[])
        session.add(row)
    elif step < row.reached_step:
        return
    first = record.get("first_step_at")
    row.resumed_from_step = int(record["resumed_from_step"])
    row.reached_step = step
    row.first_step_at = datetime.fromtimestamp(float(first), UTC) if first else None
    row.step_s = float(record["step_s"])
    row.recomputed_s = float(record["recomputed_s"])
    row.checkpoint_s = float(record["checkpoint_s"])
    row.eval_s = float(record["eval_s"])
    row.marks = [[int(s), float(t)] for s, t in record["marks"]]


def settle_before(session: Session, job_id: str, attempt: int, resumed: int) -> None:
    """`attempt` resumed from step `resumed`: of every earlier attempt not settled yet, the
    step-seconds up to it were kept, the rest is computed again."""
    earlier = session.scalars(
        select(AttemptUsage).where(
            AttemptUsage.job_id == job_id,
            AttemptUsage.attempt < attempt,
            AttemptUsage.kept_step_s.is_(None),
        )
    )
    for row in earlier:
        row.kept_step_s = step_seconds_up_to(
            resumed, row.resumed_from_step, row.marks, row.reached_step, row.step_s
        )


# -- reading ----------------------------------------------------------------------------------


def of_job(session: Session, job: Job) -> Goodput:
    if job.scheduled_at is None and job.attempt == 0:
        # Never placed: it holds no allocation and no attempt was accounted; a queued job's
        # GET, the most polled of all, skips the two reads.
        return _total((), (), {job.id: (job.created_at, job.finished_at)}, utcnow())[job.id]
    return of_jobs(session, [job])[job.id]


def of_jobs(session: Session, jobs: Sequence[Job]) -> dict[str, Goodput]:
    """Each job's goodput, in three queries however many jobs (a sweep's trials)."""
    if not jobs:
        return {}
    ids = [job.id for job in jobs]
    allocations, usage = _rows(session, Allocation.job_id.in_(ids), AttemptUsage.job_id.in_(ids))
    trials = [job.id for job in jobs if job.sweep_id is not None]
    pruned = _pruned(session, SweepTrial.job_id.in_(trials)) if trials else frozenset()
    lifetimes = {job.id: (job.created_at, job.finished_at) for job in jobs}
    return _total(allocations, usage, lifetimes, utcnow(), pruned)


def by_project(session: Session, window_s: float, project: str | None = None) -> dict[str, Goodput]:
    """Per project, over the jobs submitted in the last `window_s` seconds (whole jobs, so
    that a job's restarts and what they recomputed fall in one window)."""
    now = utcnow()
    jobs = select(Job.id, Job.project, Job.created_at, Job.finished_at).where(
        Job.created_at >= now - timedelta(seconds=window_s)
    )
    if project is not None:
        jobs = jobs.where(Job.project == project)
    listed = session.execute(jobs).all()
    projects = {job_id: name for job_id, name, _, _ in listed}
    lifetimes = {job_id: (created, finished) for job_id, _, created, finished in listed}
    ids = select(jobs.subquery().c.id)
    allocations, usage = _rows(session, Allocation.job_id.in_(ids), AttemptUsage.job_id.in_(ids))
    pruned = _pruned(session, SweepTrial.job_id.in_(ids))
    totals: dict[str, Goodput] = defaultdict(Goodput)
    for job_id, goodput in _total(allocations, usage, lifetimes, now, pruned).items():
        totals[projects[job_id]].add(goodput)
    return dict(totals)


def _rows(
    session: Session, held: ColumnElement[bool], accounted: ColumnElement[bool]
) -> tuple[Sequence[Any], Sequence[AttemptUsage]]:
    """The allocation rows and the attempts' accounting that the conditions select."""
    allocations = session.execute(
        select(Allocation.job_id, Allocation.attempt, Allocation.slots)
        .add_columns(Allocation.created_at, Allocation.released_at)
        .where(held)
    ).all()
    return allocations, session.scalars(select(AttemptUsage).where(accounted)).all()


def _pruned(session: Session, trials: ColumnElement[bool]) -> frozenset[str]:
    """The jobs, of the trials the condition selects, whose trial was pruned."""
    rows = session.scalars(
        select(SweepTrial.job_id).where(trials, SweepTrial.state == TrialState.PRUNED.value)
    )
    return frozenset(job_id for job_id in rows if job_id is not None)


def of_attempts(session: Session, job: Job) -> dict[int, Goodput]:
    """A job's goodput attempt by attempt (they add up to `of_job`'s): what each held and
    where it went, e.g. the tail of a lost attempt and the start-up of the next, which a
    restart cost on top of the steps it recomputed."""
    allocations, usage = _rows(session, Allocation.job_id == job.id, AttemptUsage.job_id == job.id)
    lifetimes = {job.id: (job.created_at, job.finished_at)}
    pruned = _pruned(session, SweepTrial.job_id == job.id) if job.sweep_id else frozenset()
    return {
        attempt: counted
        for _, attempt, counted in _per_attempt(allocations, usage, lifetimes, utcnow(), pruned)
    }


def _total(
    allocations: Iterable[Any],
    usage: Iterable[AttemptUsage],
    lifetimes: dict[str, tuple[datetime, datetime | None]],
    now: datetime,
    pruned: frozenset[str] = frozenset(),
) -> dict[str, Goodput]:
    """`lifetimes`: each job's (created, finished); every job in it has a total."""
    totals: dict[str, Goodput] = {job_id: Goodput() for job_id in lifetimes}
    for job_id, _, counted in _per_attempt(allocations, usage, lifetimes, now, pruned):
        totals.setdefault(job_id, Goodput()).add(counted)
    return totals


def _per_attempt(
    allocations: Iterable[Any],
    usage: Iterable[AttemptUsage],
    lifetimes: dict[str, tuple[datetime, datetime | None]],
    now: datetime,
    pruned: frozenset[str],
) -> Iterator[tuple[str, int, Goodput]]:
    """(job, attempt, its goodput with the wait before it), by job then attempt.
    `lifetimes`: each job's (created, finished); `pruned`: jobs of pruned trials. A row
    never released (its node died: only the node's next worker releases it) is counted
    until the job's next attempt was placed, or the job finished, or now: its ranks are
    gone by then or still running."""
    held: dict[tuple[str, int], list[tuple[int, datetime, datetime | None]]] = defaultdict(list)
    for job_id, attempt, slots, placed, released in allocations:
        held[(job_id, attempt)].append((slots, placed, released))
    numbers: dict[str, list[int]] = defaultdict(list)
    for job_id, attempt in sorted(held):
        numbers[job_id].append(attempt)
    accounted = {(row.job_id, row.attempt): row for row in usage}
    for job_id, attempts in numbers.items():
        created, finished = lifetimes.get(job_id, (None, None))
        waited_since = created
        for index, attempt in enumerate(attempts):
            rows = held[(job_id, attempt)]
            placed = min(at for _, at, _ in rows)
            if index + 1 < len(attempts):
                open_until = min(at for _, at, _ in held[(job_id, attempts[index + 1])])
            else:
                open_until = finished or now
            shares = [(s, at, until or max(open_until, at)) for s, at, until in rows]
            counted = _attempt(shares, placed, accounted.get((job_id, attempt)))
            if job_id in pruned:
                counted = Goodput(
                    allocated_slot_s=counted.allocated_slot_s,
                    pruned_slot_s=counted.allocated_slot_s,
                    attempts=counted.attempts,
                )
            counted.queued_s = max((placed - (waited_since or placed)).total_seconds(), 0.0)
            waited_since = max(until for _, _, until in shares)
            yield job_id, attempt, counted


def _attempt(
    shares: list[tuple[int, datetime, datetime]], placed: datetime, row: AttemptUsage | None
) -> Goodput:
    slots = sum(s for s, _, _ in shares)
    allocated = sum(s * max((until - at).total_seconds(), 0.0) for s, at, until in shares)
    goodput = Goodput(allocated_slot_s=allocated, attempts=1)
    if row is None or row.first_step_at is None:  # it never stepped: all of it start-up
        goodput.startup_slot_s = allocated
        return goodput
    kept = row.step_s if row.kept_step_s is None else min(row.kept_step_s, row.step_s)
    startup = max((row.first_step_at - placed).total_seconds(), 0.0) * slots
    goodput.training_slot_s = kept * slots
    goodput.recomputed_slot_s = (row.step_s - kept + row.recomputed_s) * slots
    goodput.checkpoint_slot_s = row.checkpoint_s * slots
    goodput.evaluation_slot_s = row.eval_s * slots
    goodput.startup_slot_s = min(startup, allocated)
    accounted = sum(getattr(goodput, f"{kind}_slot_s") for kind in ACCOUNTED)
    goodput.other_slot_s = max(allocated - accounted, 0.0)
    return goodput
