"""Why a job's accelerators idle, from what its steps cost: rules over a step breakdown.

The ranks measure each step's phases (data, forward, backward, optimizer, and the part of
the AllReduce or the FSDP collectives that compute did not hide), their FLOPs against the
device's peak (MFU), and the node agent samples their CPU. Each rule reads one pattern in
those figures and says what it costs and what to change, in the job's own fields where one
exists. The rules are pure functions of the breakdown, so each is tested on a crafted
case and on a healthy one; the thresholds are named here, once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

Severity = Literal["high", "medium", "info"]

COMM_SHARE = 0.15
"""Exposed communication above this share of a step is worth a change of setup."""
DATA_SHARE = 0.15
OPTIMIZER_SHARE = 0.30
SKIPPED_SHARE = 0.02
"""fp16 overflows a few times while its scaler finds its level; past this, it is the dtype."""
STRAGGLER_CPU_RATIO = 0.5
"""A rank using less than this share of its busiest peer's CPU waits on something else."""
SLOW_RANK_RATIO = 1.3
"""A rank whose compute takes this much longer than the fastest rank's holds the others back."""
LOW_MFU = 0.05
RECOMPUTED_SHARE = 0.10
"""Restarts that compute again more than this share of what the job held: checkpoint more."""
CHECKPOINT_SHARE = 0.10
"""Saves that block training for more than this share of what the job held: save less."""
HIGH_SHARE = 0.35
"""A finding that costs more than this share of each step is `high`."""


@dataclass(frozen=True)
class Breakdown:
    """Per-step means over a job's latest reported steps."""

    steps: int
    """How many reported steps the means cover."""
    step_time_s: float
    phases_s: dict[str, float] = field(default_factory=dict)
    """data, forward, backward, optimizer, allreduce_exposed, comm_exposed."""
    precision: str | None = None
    allreduce_dtype: str | None = None
    mfu: float | None = None
    skipped_steps: float = 0.0
    last_step: int = 0
    cpu_percent_by_rank: dict[int, float] = field(default_factory=dict)
    compute_s_by_rank: dict[int, float] = field(default_factory=dict)
    """Each rank's forward, backward and optimizer time per step."""
    allocated_slot_s: float = 0.0
    """The job's goodput (core/goodput.py), over all its attempts: what it held ..."""
    recomputed_slot_s: float = 0.0
    checkpoint_slot_s: float = 0.0
    """... and two places where that went without training."""
    checkpoint_every_steps: int = 0

    def share(self, *phases: str) -> float:
        if self.step_time_s <= 0:
            return 0.0
        return sum(self.phases_s.get(phase, 0.0) for phase in phases) / self.step_time_s


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: Severity
    title: str
    evidence: str
    advice: str


def _severity(share: float) -> Severity:
    return "high" if share >= HIGH_SHARE else "medium"


def exposed_allreduce(b: Breakdown) -> Finding | None:
    share = b.share("allreduce_exposed", "comm_exposed")
    if share < COMM_SHARE:
        return None
    if b.allreduce_dtype == "fp32":
        advice = (
            "set allreduce_dtype to bf16 (or fp16): half the bytes on the wire; the numerical "
            "guard compares it with fp32 and switches back if the error grows"
        )
    else:
        advice = (
            "communicate less per sample: a larger batch per rank or more grad_accum_steps, "
            "or fewer ranks over the slowest link"
        )
    return Finding(
        rule="exposed_allreduce",
        severity=_severity(share),
        title=f"the ranks wait {share:.0%} of each step for the gradient exchange",
        evidence=f"{b.allreduce_dtype or 'unknown'} reduction not hidden by the backward "
        f"pass: {share * b.step_time_s * 1e3:,.1f} ms of a {b.step_time_s * 1e3:,.1f} ms step",
        advice=advice,
    )


def input_bound(b: Breakdown) -> Finding | None:
    share = b.share("data")
    if share < DATA_SHARE:
        return None
    return Finding(
        rule="input_bound",
        severity=_severity(share),
        title=f"{share:.0%} of each step waits for the next batch",
        evidence=f"data {b.phases_s.get('data', 0.0) * 1e3:,.1f} ms per step",
        advice="prepare the data ahead: loader workers, pre-tokenised or cached inputs, "
        "fewer transforms per item",
    )


def optimizer_heavy(b: Breakdown) -> Finding | None:
    share = b.share("optimizer")
    if share < OPTIMIZER_SHARE:
        return None
    return Finding(
        rule="optimizer_heavy",
        severity="medium",
        title=f"the optimizer step takes {share:.0%} of each step",
        evidence=f"optimizer {b.phases_s.get('optimizer', 0.0) * 1e3:,.1f} ms per step",
        advice="more work per optimizer step (a larger batch or grad_accum_steps), or "
        "parallelism.strategy fsdp so each rank updates only its shard",
    )


def fp16_overflows(b: Breakdown) -> Finding | None:
    if b.precision != "fp16" or b.last_step <= 0:
        return None
    share = b.skipped_steps / b.last_step
    if share < SKIPPED_SHARE:
        return None
    return Finding(
        rule="fp16_overflows",
        severity="high",
        title=f"{share:.0%} of the steps were skipped on fp16 overflow",
        evidence=f"{b.skipped_steps:.0f} skipped of {b.last_step} steps",
        advice="use precision bf16 (fp32's range, no loss scaling) or auto",
    )


def cpu_straggler(b: Breakdown) -> Finding | None:
    if len(b.cpu_percent_by_rank) < 2:
        return None
    busiest = max(b.cpu_percent_by_rank.values())
    rank, least = min(b.cpu_percent_by_rank.items(), key=lambda item: item[1])
    if busiest <= 0 or least >= STRAGGLER_CPU_RATIO * busiest:
        return None
    return Finding(
        rule="cpu_straggler",
        severity="medium",
        title=f"rank {rank} uses {least / busiest:.0%} of the CPU its busiest peer does",
        evidence=", ".join(f"rank {r} {p:.0f}%" for r, p in sorted(b.cpu_percent_by_rank.items())),
        advice="that rank waits on something its peers do not: its node's other jobs, its "
        "disk or network, or its share of the data; every rank waits for it in each collective",
    )


def slow_rank(b: Breakdown) -> Finding | None:
    if len(b.compute_s_by_rank) < 2:
        return None
    rank, slowest = max(b.compute_s_by_rank.items(), key=lambda item: item[1])
    fastest = min(b.compute_s_by_rank.values())
    if fastest <= 0 or slowest < SLOW_RANK_RATIO * fastest:
        return None
    return Finding(
        rule="slow_rank",
        severity="medium",
        title=f"rank {rank} computes {slowest / fastest - 1:.0%} longer than the fastest rank",
        evidence=", ".join(
            f"rank {r} {s * 1e3:,.1f} ms" for r, s in sorted(b.compute_s_by_rank.items())
        ),
        advice="the others wait for it at every gradient exchange: a slower or busier "
        "device or node, or uneven work per rank (variable-length batches)",
    )


def low_mfu(b: Breakdown) -> Finding | None:
    if b.mfu is None or b.mfu >= LOW_MFU:
        return None
    return Finding(
        rule="low_mfu",
        severity="info",
        title=f"the model uses {b.mfu:.1%} of the devices' peak FLOP/s",
        evidence=f"MFU {b.mfu:.3f} over the last {b.steps} reported steps",
        advice="a small model or batch keeps the devices waiting on launches and memory: "
        "a larger batch per rank, bf16 compute, or fewer ranks for this size",
    )


def _of_held(b: Breakdown, slot_s: float) -> float:
    """A share of the slot-seconds the job held (its goodput's allocated)."""
    return slot_s / b.allocated_slot_s if b.allocated_slot_s else 0.0


def recomputed_work(b: Breakdown) -> Finding | None:
    share = _of_held(b, b.recomputed_slot_s)
    if share <= RECOMPUTED_SHARE:
        return None
    every = b.checkpoint_every_steps
    now = f"every {every} steps" if every else "only at the end and when preempted"
    return Finding(
        rule="recomputed_work",
        severity=_severity(share),
        title=f"{share:.0%} of the slot-seconds the job held went into steps computed again",
        evidence=f"{b.recomputed_slot_s:,.0f} of {b.allocated_slot_s:,.0f} slot-seconds were "
        f"steps past the checkpoint a restart resumed from; it checkpoints {now}",
        advice="checkpoint more often (checkpoint.every_steps): a restart then loses at most "
        "the steps since the last save",
    )


def checkpoint_stalls(b: Breakdown) -> Finding | None:
    share = _of_held(b, b.checkpoint_slot_s)
    if share <= CHECKPOINT_SHARE:
        return None
    return Finding(
        rule="checkpoint_stalls",
        severity=_severity(share),
        title=f"training waited on checkpoints for {share:.0%} of the slot-seconds it held",
        evidence=f"{b.checkpoint_slot_s:,.0f} of {b.allocated_slot_s:,.0f} slot-seconds blocked "
        f"on saves, every {b.checkpoint_every_steps or '?'} steps",
        advice="checkpoint less often (checkpoint.every_steps), or shard the states (FSDP "
        "saves each rank's share in parallel)",
    )


RULES: tuple[Callable[[Breakdown], Finding | None], ...] = (
    exposed_allreduce,
    input_bound,
    optimizer_heavy,
    fp16_overflows,
    cpu_straggler,
    slow_rank,
    low_mfu,
    recomputed_work,
    checkpoint_stalls,
)


def diagnose(breakdown: Breakdown) -> list[Finding]:
    order = {"high": 0, "medium": 1, "info": 2}
    found = [finding for rule in RULES if (finding := rule(breakdown)) is not None]
    return sorted(found, key=lambda finding: order[finding.severity])
