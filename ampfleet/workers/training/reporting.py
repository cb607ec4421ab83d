"""What a reported step tells, apart from the step itself (`loop.Trainer.train_step`), which
only measures and returns its `StepOutcome`.

A reported step costs one collective: every rank's loss, peak memory and compute time go in
one all_reduce (a rank that computes longer makes every other wait in each collective, so
each rank's time is worth seeing). Rank 0 then writes the step's metrics and progress, once
the FLOPs of a step and the peak they are measured against, and prints the step line.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ampfleet.workers.training.flops import Peak, StepFlops, utilisation
from ampfleet.workers.training.parallel import MB, peak_memory_bytes
from ampfleet.workers.training.stragglers import StragglerWatch
from ampfleet.workers.training.timing import StepTimer

COMPUTE_PHASES = ("forward", "backward", "optimizer")

Record = Callable[..., None]
"""Writes one record of a kind, with its fields (rank 0's writer; a no-op elsewhere)."""


@dataclass(frozen=True)
class StepOutcome:
    """One optimizer step as `train_step` returns it. Its tensors stay on the device: only a
    reported step reads them back (a host-device sync on a GPU)."""

    step: int
    """Steps done, this one included."""
    reporting: bool
    """A step to report: every `log_every_steps`, and the last one."""
    started: float
    """`time.perf_counter()` as the step began."""
    learning_rate: float
    loss_sum: torch.Tensor | None
    """This rank's loss, summed over the micro-steps (each divided by their count); None: a
    script's report that names no loss."""
    grad_norm: torch.Tensor
    timer: StepTimer
    """Time per phase; only a reported step is timed."""
    precision: str
    """What the step computed in."""
    skipped_steps: int
    """Steps skipped so far for non-finite gradients, this one included."""
    allreduce_bytes: int
    allreduce_relative_error: float | None
    """The guard's measure, on the steps it checks."""
    loss_scale: float | None
    """fp16's loss scale after the step, on reported steps."""
    fsdp_times: tuple[float, float] | None
    """FSDP's (all-gather, reduce-scatter) seconds; None under DDP."""


class StepReporter:
    def __init__(
        self,
        *,
        rank: int,
        world_size: int,
        device: torch.device,
        samples_per_step: int,
        flops: StepFlops,
        peak: Peak | None,
        total_steps: int | None,
        record: Record,
        stragglers: StragglerWatch | None = None,
    ) -> None:
        self.rank = rank
        self.world_size = world_size
        self.device = device
        self.samples_per_step = samples_per_step
        """Samples in one optimizer step, every rank's together; 0: unknown (no samples/s)."""
        self.flops = flops
        self.peak = peak
        self.total_steps = total_steps
        self.record = record
        self.stragglers = stragglers
        self.compute_reported = False

    def report(
        self, outcome: StepOutcome, extra: dict[str, float] | None = None
    ) -> dict[str, float]:
        """The step's metrics, written and printed. Every rank calls it on a reported step.
        `extra`: more values of the step (a script's own), written beside the platform's;
        a name the platform reports itself is the platform's."""
        metrics = self._metrics(outcome)
        metrics.update({k: v for k, v in (extra or {}).items() if k not in metrics})
        if self.stragglers is not None:
            compute = [metrics[f"compute_s_rank{r}"] for r in range(self.world_size)]
            ratio, events = self.stragglers.observe(outcome.step, compute)
            if ratio is not None:
                metrics["straggler_ratio"] = ratio
            for message in events:
                self.record("event", reason="straggler", message=message)
        if not self.compute_reported:
            self.compute_reported = True
            where = f"{self.device} in {outcome.precision}"
            self.record(
                "compute",
                step_flops=self.flops.per_step or 0,
                peak_flops_per_s=self.peak.flops_per_s if self.peak else None,
                message=self.flops.message(self.peak, where),
            )
        self.record("metrics", step=outcome.step, values=metrics)
        if self.rank == 0:
            loss = f" loss {metrics['loss']:.4g}" if "loss" in metrics else ""
            pace = (
                f" {metrics['samples_per_s']:.0f} samples/s" if "samples_per_s" in metrics else ""
            )
            print(
                f"step {outcome.step}/{self.total_steps or '?'}{loss} "
                f"lr {outcome.learning_rate:.2e}{pace}",
                flush=True,
            )
        self.record("progress", step=outcome.step, total_steps=self.total_steps)
        return metrics

    def _metrics(self, outcome: StepOutcome) -> dict[str, float]:
        grad_norm = float(outcome.grad_norm)
        world_size, timer = self.world_size, outcome.timer
        peaks = torch.zeros(world_size, device=self.device)
        peaks[self.rank] = peak_memory_bytes(self.device) / MB
        busy = torch.zeros(world_size, device=self.device)
        busy[self.rank] = sum(timer.seconds.get(p, 0.0) for p in COMPUTE_PHASES)
        loss = torch.zeros(1, device=self.device)
        if outcome.loss_sum is not None:
            loss = outcome.loss_sum.reshape(1).to(self.device, torch.float32)
        reported = torch.cat([loss, peaks, busy])
        dist.all_reduce(reported)
        loss_sum = reported[0]
        peaks, busy = reported[1:].split(world_size)
        step_time = time.perf_counter() - outcome.started
        metrics: dict[str, float] = {
            **({"loss": loss_sum.item() / world_size} if outcome.loss_sum is not None else {}),
            "peak_memory_mb": float(peaks.max()),
            **{f"peak_memory_mb_rank{r}": float(mb) for r, mb in enumerate(peaks.tolist())},
            **{f"compute_s_rank{r}": float(s) for r, s in enumerate(busy.tolist())},
            "learning_rate": outcome.learning_rate,
            "grad_norm": grad_norm,
            "step_time_s": step_time,
            **(
                {"samples_per_s": self.samples_per_step / step_time}
                if self.samples_per_step
                else {}
            ),
            "skipped_steps": float(outcome.skipped_steps),
            "allreduce_bytes": float(outcome.allreduce_bytes),
            **{f"time_{name}_s": seconds for name, seconds in timer.seconds.items()},
            **utilisation(self.flops.per_step or 0, world_size, step_time, self.peak),
        }
        if outcome.fsdp_times is not None:
            metrics["time_all_gather_s"], metrics["time_reduce_scatter_s"] = outcome.fsdp_times
        if outcome.loss_scale is not None:
            metrics["loss_scale"] = outcome.loss_scale
        if outcome.allreduce_relative_error is not None:
            metrics["allreduce_relative_error"] = outcome.allreduce_relative_error
        return metrics
