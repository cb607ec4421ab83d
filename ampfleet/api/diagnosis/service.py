"""A job's diagnosis: its latest steps' breakdown, and the rules that fire on it."""

from __future__ import annotations

import re

from sqlalchemy.orm import Session

from ampfleet.api.auth import Principal
from ampfleet.api.diagnosis import repository
from ampfleet.api.diagnosis.rules import Breakdown, diagnose
from ampfleet.api.diagnosis.schemas import BreakdownOut, DiagnosisOut, FindingOut
from ampfleet.api.jobs import service as jobs
from ampfleet.core import goodput
from ampfleet.core.goodput import Goodput

WINDOW_STEPS = 50
"""The latest steps a diagnosis averages: the job as it runs now, past its warm-up."""
PHASES = ("data", "forward", "backward", "optimizer", "allreduce_exposed", "comm_exposed")
_CPU_SERIES = re.compile(r"^cpu_percent_rank(\d+)$")
_COMPUTE_SERIES = re.compile(r"^compute_s_rank(\d+)$")


def _by_rank(means: dict[str, float], series: re.Pattern[str]) -> dict[int, float]:
    return {int(m.group(1)): value for name, value in means.items() if (m := series.match(name))}


def breakdown_of(
    steps: int,
    last_step: int,
    means: dict[str, float],
    precision: str | None,
    reduce: str | None,
    spent: Goodput | None = None,
    checkpoint_every_steps: int = 0,
) -> Breakdown:
    spent = spent or Goodput()
    return Breakdown(
        steps=steps,
        step_time_s=means.get(repository.STEP_SERIES, 0.0),
        phases_s={p: means[f"time_{p}_s"] for p in PHASES if f"time_{p}_s" in means},
        precision=precision,
        allreduce_dtype=reduce,
        mfu=means.get("mfu"),
        # A cumulative count: its mean over the window is close to its latest value.
        skipped_steps=means.get("skipped_steps", 0.0),
        last_step=last_step,
        cpu_percent_by_rank=_by_rank(means, _CPU_SERIES),
        compute_s_by_rank=_by_rank(means, _COMPUTE_SERIES),
        allocated_slot_s=spent.allocated_slot_s,
        recomputed_slot_s=spent.recomputed_slot_s,
        checkpoint_slot_s=spent.checkpoint_slot_s,
        checkpoint_every_steps=checkpoint_every_steps,
    )


def diagnosis(session: Session, job_id: str, principal: Principal) -> DiagnosisOut:
    job = jobs.get(session, job_id, principal)
    steps, last_step, means = repository.latest_means(session, job_id, WINDOW_STEPS)
    breakdown = breakdown_of(
        steps,
        last_step,
        means,
        job.precision,
        job.allreduce_dtype,
        goodput.of_job(session, job),
        int((job.resolved.get("checkpoint") or {}).get("every_steps") or 0),
    )
    findings = diagnose(breakdown) if steps else []
    return DiagnosisOut(
        job_id=job.id,
        state=job.state,
        breakdown=BreakdownOut(
            steps=steps,
            to_step=last_step,
            step_time_s=breakdown.step_time_s if steps else None,
            shares={phase: breakdown.share(phase) for phase in breakdown.phases_s},
            mfu=breakdown.mfu,
            cpu_percent_by_rank=breakdown.cpu_percent_by_rank,
        ),
        findings=[FindingOut(**vars(finding)) for finding in findings],
    )
