"""A model prepared the way a job's spec says, and the tail of every optimizer step: what the
built-in loop (loop.py) and a script's session (ampfleet/train) share, so both apply the
job's precision, sharding and reduction alike.

Preparing: the strategy (DDP or FSDP2, `auto` measured on the built model: parallel.py),
the gradient reduction in the job's dtype with its numerical guard (allreduce.py), the
compute precision with a loss scaler for fp16 only. A step's tail: unscale, the finite
check, clip, the optimizer's step (fp16's scaler skips it on overflow itself), the scaler's
update. A streak of non-finite steps raises: `PrecisionFallbackError` where `auto` may fall
back (fp16 -> bf16 -> fp32), `TrainingDivergedError` where it may not; going back to a
checkpoint after a fallback is the caller's, who owns the checkpoints.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.optim import Optimizer

from ampfleet.workers.training.allreduce import AllReduceState
from ampfleet.workers.training.allreduce_auto import (
    DDP_BUCKET_ELEMENTS,
    AutoChoice,
    measure_auto,
)
from ampfleet.workers.training.parallel import (
    MB,
    ParallelConfig,
    ParallelModel,
    choose_strategy,
    compile_unavailable,
    hold_frozen_in,
)
from ampfleet.workers.training.precision import (
    DTYPES,
    later_in_chain,
    next_precision,
    resolve_allreduce_dtype,
)
from ampfleet.workers.training.reporting import Record

# Consecutive steps with non-finite gradients before we act. fp16 gets more room: its
# loss scaler is expected to overflow a few times while it finds its level.
NONFINITE_STREAK_LIMIT = {"fp16": 16, "bf16": 8, "fp32": 8}


class TrainingDivergedError(RuntimeError):
    pass


class PrecisionFallbackError(Exception):
    def __init__(self, target: str, reason: str) -> None:
        super().__init__(reason)
        self.target = target
        self.reason = reason


class PreparedModel:
    """One rank's model under the job's strategy, precision and reduction. `module` runs
    forward and backward (DDP's wrapper, or the model FSDP sharded in place); `model` is the
    model itself, for state dicts and evaluation. Build the optimizer over `model`'s
    parameters after this: FSDP replaces them with its shards."""

    def __init__(
        self,
        model: nn.Module,
        *,
        blocks: Sequence[nn.Module] | None,
        requested_precision: str,
        requested_allreduce_dtype: str,
        precision: str,
        allreduce_dtype: str,
        backend: str,
        device: torch.device,
        world_size: int,
        parallel: ParallelConfig,
        ranks_on_node: int = 1,
        guard_every_steps: int = 50,
        guard_threshold: float = 1e-2,
        record: Record | None = None,
    ) -> None:
        if parallel.compile and (reason := compile_unavailable(device)):
            raise RuntimeError(reason)
        self.requested_precision = requested_precision
        self.requested_allreduce_dtype = requested_allreduce_dtype
        self.precision = precision
        self.backend = backend
        self.device = device
        self.world_size = world_size
        self.record: Record = record or (lambda _kind, **_fields: None)
        self.requested_strategy = parallel.strategy
        self.model = model.to(device)
        if not self.may_fall_back():
            hold_frozen_in(self.model, precision)
        self.strategy = choose_strategy(parallel, self.model, device, world_size, ranks_on_node)
        self.comm = AllReduceState(
            dtype=DTYPES[allreduce_dtype],
            backend=backend,
            guard_every=guard_every_steps,
            guard_threshold=guard_threshold,
        )
        self.parallel = ParallelModel(
            self.model,
            self.strategy.strategy,
            blocks=blocks,
            cfg=parallel,
            precision=precision,
            comm=self.comm,
            device=device,
        )
        self.module = self.parallel.module
        self.scaler = self.parallel.make_grad_scaler(precision, device)
        self.auto_allreduce: AutoChoice | None = None
        """What `allreduce_dtype: auto` took, measured here or kept from a checkpoint."""
        self.skipped_steps = 0
        self.nonfinite_streak = 0
        self.allreduce_switch_reported = False

    # -- a step ---------------------------------------------------------------------------

    def begin_step(self, step: int) -> None:
        """Readies the reduction for step `step` + 1; between steps, nothing in flight."""
        reduce_dtype = self.comm.dtype
        self.comm.begin_step(step)
        if self.comm.dtype != reduce_dtype:  # the guard switched the job to fp32
            self.parallel.set_dtypes(self.precision, self.comm.dtype)
        self.parallel.times.reset()

    def backward(self, loss: torch.Tensor) -> None:
        self.scaler.scale(loss).backward()

    def finish_step(
        self, optimizer: Optimizer, grad_clip: float | None, step: int
    ) -> tuple[torch.Tensor, bool]:
        """Step `step` + 1's tail, after its backward: (the gradient norm, whether it was
        finite). Raises on a streak of non-finite steps (see `check_finite`)."""
        self.scaler.unscale_(optimizer)
        # Gradients are identical on every rank after the AllReduce, so every rank
        # takes the same decision here without another collective.
        grad_norm = self.parallel.clip_grad_norm(grad_clip if grad_clip else math.inf)
        finite = bool(torch.isfinite(grad_norm))
        self.check_finite(finite, step)
        if finite or self.precision == "fp16":
            self.scaler.step(optimizer)  # fp16: skips the update itself on overflow
        self.scaler.update()
        optimizer.zero_grad(set_to_none=True)
        return grad_norm, finite

    def check_finite(self, finite: bool, step: int) -> None:
        if finite:
            self.nonfinite_streak = 0
            return
        self.skipped_steps += 1
        self.nonfinite_streak += 1
        if self.nonfinite_streak < NONFINITE_STREAK_LIMIT[self.precision]:
            return
        what = (
            f"gradients were non-finite for {self.nonfinite_streak} steps in a row at step "
            f"{step} under {self.precision}"
        )
        target = next_precision(self.precision, self.device)
        if self.may_fall_back() and target is not None:
            raise PrecisionFallbackError(target, what)
        advice = (
            "use precision 'auto' or 'bf16'"
            if self.precision == "fp16"
            else ("lower the learning rate or clip harder")
        )
        raise TrainingDivergedError(f"{what}: {advice}")

    def fsdp_times(self) -> tuple[float, float] | None:
        """FSDP's (all-gather, reduce-scatter) seconds this step; None under DDP."""
        if self.parallel.strategy != "fsdp":
            return None
        return self.parallel.times.all_gather_s, self.parallel.times.reduce_scatter_s

    def loss_scale(self) -> float | None:
        return float(self.scaler.get_scale()) if self.precision == "fp16" else None

    def report_allreduce_switch(self) -> None:
        """Once the guard switched the reduction to fp32: its event and the new setup."""
        if self.comm.switch_reason and not self.allreduce_switch_reported:
            self.allreduce_switch_reported = True
            self.record("event", reason="allreduce_fallback", message=self.comm.switch_reason)
            self.record("setup", **self.setup())

    # -- precision ------------------------------------------------------------------------

    def may_fall_back(self) -> bool:
        return self.requested_precision == "auto" and self.precision != "fp32"

    def fall_back(self, target: str) -> None:
        """Computes in `target` from the next step; an `auto` reduction follows it (unless
        it measured fp32, or the guard switched it there)."""
        measured_fp32 = self.auto_allreduce is not None and self.auto_allreduce.dtype == "fp32"
        auto = self.requested_allreduce_dtype == "auto" and not measured_fp32
        if auto and self.comm.switch_reason is None:
            self.comm.dtype = DTYPES[resolve_allreduce_dtype("auto", target, self.backend)]
        self.use_precision(target)
        self.nonfinite_streak = 0

    def use_precision(self, precision: str) -> None:
        """Computes in `precision` from the next step: the model's dtypes, a new scaler."""
        self.precision = precision
        self.parallel.set_dtypes(precision, self.comm.dtype)
        self.scaler = self.parallel.make_grad_scaler(precision, self.device)

    def continue_precision_of(self, setup: dict[str, Any], scaler: dict[str, Any]) -> None:
        """From a checkpoint made under `setup`: an `auto` job keeps the fallback an earlier
        attempt took (it would fail the same way again), and fp16 keeps the loss scale it
        had found."""
        saved = setup["precision"]
        if self.requested_precision == "auto" and later_in_chain(saved, self.precision):
            self.use_precision(saved)
        if saved == "fp16" and self.precision == "fp16":
            self.scaler.load_state_dict(scaler)

    def setup(self) -> dict[str, str]:
        return {
            "precision": self.precision,
            "allreduce_dtype": self.comm.dtype_name,
            **self.parallel.dtypes(self.precision),
        }

    def strategy_event(self) -> None:
        """`auto` strategy: what it chose and why, as an event."""
        if self.requested_strategy != "auto":
            return
        choice = self.strategy
        self.record(
            "event",
            reason="parallelism",
            message=f"{choice.strategy.upper()}: model states "
            f"{choice.state_bytes / MB:,.0f} MB per replica ({choice.reason}), "
            f"{self.parallel.state_bytes_per_rank() / MB:,.0f} MB on each rank; "
            + ", ".join(f"{k} {v}" for k, v in self.parallel.dtypes(self.precision).items()),
        )

    # -- auto reduction -------------------------------------------------------------------

    def choose_auto_allreduce(
        self, saved: dict[str, Any] | None, saved_step: int | None, attempt: int
    ) -> None:
        """`allreduce_dtype: auto` under DDP across ranks: time an fp32 and a half-precision
        reduction of one gradient bucket on the job's own process group and keep half
        precision only where it pays: where the wire, not the CPU that casts and swaps, is
        what a reduction waits on. Every rank takes the slowest rank's figures, so all
        choose alike; the figures are an event. FSDP reduce-scatters in the policy's dtype.

        A job measures once: an attempt resuming a checkpoint (of `saved_step`, whose choice
        was `saved`) keeps the choice it was made under (every rank restores the same one,
        so all keep alike), unless this attempt runs on another world size or backend,
        where the figures say nothing; then it measures again, and the event says why."""
        half = self.comm.dtype_name
        if (
            self.requested_allreduce_dtype != "auto"
            or half == "fp32"
            or self.world_size < 2
            or self.strategy.strategy != "ddp"
        ):
            return
        earlier = AutoChoice(**saved) if saved else None
        if saved_step is not None and earlier is not None:
            if earlier.applies_to(self.world_size, self.backend):
                self._take_auto_allreduce(
                    earlier,
                    f"kept {earlier.dtype}, the choice the checkpoint of step {saved_step} "
                    f"was made under ({earlier.describe()})",
                )
                return
            again = (
                f"measured again: the earlier choice ({earlier.dtype}) was measured on "
                f"{earlier.world_size} {earlier.backend} ranks"
            )
        elif attempt > 1:
            again = "measured again: no checkpoint of an earlier attempt carries its choice"
        else:
            again = ""
        parameters = sum(p.numel() for p in self.model.parameters() if p.requires_grad)
        choice = measure_auto(self.comm, half, min(parameters, DDP_BUCKET_ELEMENTS), self.device)
        self._take_auto_allreduce(choice, "; ".join(filter(None, [choice.describe(), again])))

    def _take_auto_allreduce(self, choice: AutoChoice, message: str) -> None:
        self.auto_allreduce = choice
        dtype = choice.dtype
        if dtype != "fp32":  # a half-precision choice follows the compute, as `fall_back`
            dtype = resolve_allreduce_dtype("auto", self.precision, self.backend)
        self.comm.dtype = DTYPES[dtype]
        self.comm.algorithm = choice.wire
        self.record("event", reason="allreduce_auto", message=message)

    def close(self) -> None:
        # A live communication thread at interpreter exit aborts the process.
        self.comm.close()
