"""The training loop. One optimizer step reads top to bottom in `Trainer.step_once`:
micro-steps under autocast (no_sync until the last), unscale, finite check, clip, step,
update, zero_grad. Around it: resume, logging, evaluation, checkpoints, and the precision
fallback (fp16 -> bf16 -> fp32) that `auto` jobs take when the numbers stop being finite."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

from ampfleet.workers.rundir import RecordWriter
from ampfleet.workers.training import checkpoint
from ampfleet.workers.training.allreduce import AllReduceState, attach
from ampfleet.workers.training.precision import (
    DTYPES,
    autocast,
    make_grad_scaler,
    next_precision,
    resolve_allreduce_dtype,
)
from ampfleet.workers.training.task import Batch, TrainingTask
from ampfleet.workers.training.timing import StepTimer

# Ranks agree on stopping (preemption) every this many steps: a tiny collective, but on a
# GPU it is also a host-device sync, so not every step.
STOP_CHECK_EVERY = 10
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


@dataclass(frozen=True)
class LoopConfig:
    max_steps: int | None
    epochs: int | None
    requested_precision: str
    requested_allreduce_dtype: str
    precision: str
    allreduce_dtype: str
    backend: str
    device: torch.device
    rank: int
    world_size: int
    seed: int
    eval_every_steps: int
    log_every_steps: int
    checkpoint_every_steps: int
    keep_last_checkpoints: int
    checkpoint_dir: Path
    guard_every_steps: int = 50
    guard_threshold: float = 1e-2


def lr_at(step: int, *, base: float, warmup: int, total: int) -> float:
    """Linear warmup, then cosine decay to 10% of the base rate."""
    if warmup and step < warmup:
        return base * (step + 1) / warmup
    progress = (step - warmup) / max(total - warmup, 1)
    return base * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0))))


def to_device(batch: Batch, device: torch.device) -> Batch:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, list | tuple):
        return type(batch)(to_device(b, device) for b in batch)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    return batch


class Trainer:
    def __init__(
        self,
        task: TrainingTask,
        cfg: LoopConfig,
        writer: RecordWriter | None,
        stop_requested: Callable[[], bool] | None = None,
    ) -> None:
        self.task = task
        self.stop_requested = stop_requested or (lambda: False)
        self.cfg = cfg
        self.writer = writer
        self.device = cfg.device
        self.precision = cfg.precision
        self.model = task.model.to(self.device)
        self.ddp = DistributedDataParallel(
            self.model, device_ids=[self.device.index] if self.device.type == "cuda" else None
        )
        self.comm = AllReduceState(
            dtype=DTYPES[cfg.allreduce_dtype],
            backend=cfg.backend,
            guard_every=cfg.guard_every_steps,
            guard_threshold=cfg.guard_threshold,
        )
        attach(self.ddp, self.comm)
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=task.learning_rate, weight_decay=task.weight_decay
        )
        self.scaler = make_grad_scaler(self.precision, self.device)
        self.sampler: DistributedSampler[Any] = DistributedSampler(
            task.train_dataset,
            num_replicas=cfg.world_size,
            rank=cfg.rank,
            shuffle=True,
            seed=cfg.seed,
            drop_last=True,
        )
        # A loader generator of its own: creating an iterator must not draw from the global
        # RNG (dropout's), or a resumed run would diverge from an uninterrupted one.
        self.loader = DataLoader(
            task.train_dataset,
            batch_size=task.batch_size,
            sampler=self.sampler,
            drop_last=True,
            collate_fn=task.collate_fn,
            generator=torch.Generator().manual_seed(cfg.seed),
        )
        if len(self.loader) < 1:
            raise ValueError("the training set is smaller than one batch per rank")
        steps_per_epoch = max(len(self.loader) // task.grad_accum_steps, 1)
        total = min(cfg.max_steps or math.inf, (cfg.epochs or math.inf) * steps_per_epoch)
        self.total_steps = int(total)
        self.step = 0
        self.skipped_steps = 0
        self.nonfinite_streak = 0
        self.checkpoint_owed = False
        self.batches: Iterator[Batch] = iter(())

    # -- the run --------------------------------------------------------------------------

    def run(self) -> dict[str, float]:
        try:
            return self._run()
        finally:
            # A live communication thread at interpreter exit aborts the process.
            self.comm.close()

    def _run(self) -> dict[str, float]:
        self.step = self._resume()
        self.batches = self.micro_batches(start=self.step * self.task.grad_accum_steps)
        if self._may_fall_back() and checkpoint.latest(self.cfg.checkpoint_dir) is None:
            self._save()  # the "last good" point a precision fallback returns to
        self._record(
            "started",
            total_steps=self.total_steps,
            resumed_from_step=self.step,
            world_size=self.cfg.world_size,
            backend=self.cfg.backend,
            **self._setup(),
        )
        print(
            f"rank {self.cfg.rank}/{self.cfg.world_size} on {self.device} ({self.cfg.backend}): "
            f"{self.precision} compute, {self.comm.dtype_name} AllReduce, "
            f"{self.total_steps} steps from step {self.step}",
            flush=True,
        )
        last: dict[str, float] = {}
        while self.step < self.total_steps:
            try:
                metrics = self.step_once()
            except PrecisionFallbackError as fallback:
                self._fall_back(fallback)
                continue
            if metrics:
                last = metrics
            self._after_step()
            if self.step % STOP_CHECK_EVERY == 0 and self._stop_agreed():
                # Preempted: leave a checkpoint at this exact step and exit cleanly.
                self._save()
                self._record("preempted", step=self.step)
                return last
        final = self.evaluate()
        self._record("metrics", step=self.step, values=final)
        self._save()
        return {**last, **final}

    def step_once(self) -> dict[str, float]:
        """One optimizer step; returns the step's metrics when it is a logging step."""
        cfg, task = self.cfg, self.task
        reporting = (self.step + 1) % cfg.log_every_steps == 0 or self.step + 1 == self.total_steps
        timer = StepTimer(self.device, enabled=reporting)
        started = time.perf_counter()
        lr = lr_at(
            self.step, base=task.learning_rate, warmup=task.warmup_steps, total=self.total_steps
        )
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.comm.begin_step(self.step)

        loss_sum = torch.zeros((), device=self.device)
        for micro in range(task.grad_accum_steps):
            last_micro = micro == task.grad_accum_steps - 1
            with timer.phase("data"):
                batch = to_device(next(self.batches), self.device)
            with contextlib.nullcontext() if last_micro else self.ddp.no_sync():
                with timer.phase("forward"), autocast(self.precision, self.device):
                    loss = task.loss(self.ddp, batch) / task.grad_accum_steps
                with timer.phase("backward"):
                    self.scaler.scale(loss).backward()
            if last_micro and self.comm.last_launch:
                # Backward returned only once the last bucket's AllReduce was done.
                timer.move(
                    "backward", "allreduce_exposed", time.perf_counter() - self.comm.last_launch
                )
            loss_sum += loss.detach().float()

        with timer.phase("optimizer"):
            self.scaler.unscale_(self.optimizer)
            # Gradients are identical on every rank after the AllReduce, so every rank
            # takes the same decision here without another collective.
            grad_norm = torch.nn.utils.clip_grad_norm_(
                self.model.parameters(), task.grad_clip if task.grad_clip else math.inf
            )
            finite = bool(torch.isfinite(grad_norm))
            self._check_finite(finite)
            if finite or self.precision == "fp16":
                self.scaler.step(self.optimizer)  # fp16: skips the update itself on overflow
            self.scaler.update()
            self.optimizer.zero_grad(set_to_none=True)
        self.step += 1

        if not reporting:
            return {}
        dist.all_reduce(loss_sum)
        step_time = time.perf_counter() - started
        metrics = {
            "loss": loss_sum.item() / cfg.world_size,
            "learning_rate": lr,
            "grad_norm": float(grad_norm),
            "step_time_s": step_time,
            "samples_per_s": task.batch_size
            * task.grad_accum_steps
            * cfg.world_size
            * task.samples_per_item
            / step_time,
            "skipped_steps": float(self.skipped_steps),
            "allreduce_bytes": float(self.comm.bytes_this_step),
            **{f"time_{name}_s": seconds for name, seconds in timer.seconds.items()},
        }
        if self.precision == "fp16":
            metrics["loss_scale"] = float(self.scaler.get_scale())
        if self.comm.last_relative_error is not None:
            metrics["allreduce_relative_error"] = self.comm.last_relative_error
        self._record("metrics", step=self.step, values=metrics)
        if cfg.rank == 0:
            print(
                f"step {self.step}/{self.total_steps} loss {metrics['loss']:.4f} "
                f"lr {lr:.2e} {metrics['samples_per_s']:.0f} samples/s",
                flush=True,
            )
        self._record("progress", step=self.step, total_steps=self.total_steps)
        return metrics

    def _after_step(self) -> None:
        cfg = self.cfg
        if self.comm.switch_reason and not getattr(self, "_switch_reported", False):
            self._switch_reported = True
            self._record("event", reason="allreduce_fallback", message=self.comm.switch_reason)
            self._record("setup", **self._setup())
        if (
            cfg.eval_every_steps
            and self.step % cfg.eval_every_steps == 0
            and (self.step < self.total_steps)
        ):
            self._record("metrics", step=self.step, values=self.evaluate())
        if cfg.checkpoint_every_steps and self.step % cfg.checkpoint_every_steps == 0:
            self.checkpoint_owed = True
        # Never checkpoint inside a streak of skipped steps: such a checkpoint holds no
        # progress, and keeping only the last K could push out the last good one.
        if self.checkpoint_owed and self.nonfinite_streak == 0:
            self._save()
            self.checkpoint_owed = False

    def _stop_agreed(self) -> bool:
        """Ranks get the stop signal at slightly different moments; they must all stop
        after the same step, so the flag goes through a (one-element) MAX all_reduce."""
        flag = torch.tensor([1.0 if self.stop_requested() else 0.0], device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    # -- precision fallback ---------------------------------------------------------------

    def _may_fall_back(self) -> bool:
        return self.cfg.requested_precision == "auto" and self.precision != "fp32"

    def _check_finite(self, finite: bool) -> None:
        if finite:
            self.nonfinite_streak = 0
            return
        self.skipped_steps += 1
        self.nonfinite_streak += 1
        if self.nonfinite_streak < NONFINITE_STREAK_LIMIT[self.precision]:
            return
        what = (
            f"gradients were non-finite for {self.nonfinite_streak} steps in a row at step "
            f"{self.step} under {self.precision}"
        )
        target = next_precision(self.precision, self.device)
        if self._may_fall_back() and target is not None:
            raise PrecisionFallbackError(target, what)
        advice = (
            "use precision 'auto' or 'bf16'"
            if self.precision == "fp16"
            else ("lower the learning rate or clip harder")
        )
        raise TrainingDivergedError(f"{what}: {advice}")

    def _fall_back(self, fallback: PrecisionFallbackError) -> None:
        previous = self.precision
        self.precision = fallback.target
        if self.cfg.requested_allreduce_dtype == "auto" and self.comm.switch_reason is None:
            self.comm.dtype = DTYPES[
                resolve_allreduce_dtype("auto", self.precision, self.cfg.backend)
            ]
        self.scaler = make_grad_scaler(self.precision, self.device)
        self.optimizer.zero_grad(set_to_none=True)  # the failed step's gradients
        self.nonfinite_streak = 0
        # The last good checkpoint, from before the streak of non-finite steps began (none
        # is written inside a streak, and one exists from step 0 on: see `_run`).
        self.step = self._resume()
        self.batches = self.micro_batches(start=self.step * self.task.grad_accum_steps)
        self._record("rewound", step=self.step)  # the steps after it are reported again
        self._record(
            "event",
            reason="precision_fallback",
            message=f"{previous} -> {self.precision}: {fallback.reason}; resumed from the "
            f"checkpoint at step {self.step}",
        )
        self._record("setup", **self._setup())

    def _setup(self) -> dict[str, str]:
        return {"precision": self.precision, "allreduce_dtype": self.comm.dtype_name}

    # -- data, evaluation, checkpoints ----------------------------------------------------

    def micro_batches(self, start: int) -> Iterator[Batch]:
        """Endless micro-batches over epochs, starting after `start` consumed ones."""
        per_epoch = len(self.loader)
        epoch, skip = divmod(start, per_epoch)
        while True:
            self.sampler.set_epoch(epoch)
            for index, batch in enumerate(self.loader):
                if index >= skip:
                    yield batch
            epoch, skip = epoch + 1, 0

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Every rank scores its shard; the sums are all-reduced, so the result is exact."""
        task, cfg = self.task, self.cfg
        if task.val_dataset is None:
            return {}
        sampler: DistributedSampler[Any] = DistributedSampler(
            task.val_dataset, num_replicas=cfg.world_size, rank=cfg.rank, shuffle=False
        )
        loader = DataLoader(
            task.val_dataset,
            batch_size=task.batch_size,
            sampler=sampler,
            collate_fn=task.collate_fn,
        )
        was_training = self.model.training
        self.model.eval()
        sums: dict[str, torch.Tensor] = {}
        for index, batch in enumerate(loader):
            if task.eval_max_batches is not None and index >= task.eval_max_batches:
                break
            with autocast(self.precision, self.device):
                scored = task.eval_step(self.model, to_device(batch, self.device))
            for name, value in scored.items():
                sums[name] = sums.get(name, torch.zeros((), device=self.device)) + value.float()
        self.model.train(was_training)
        names = sorted(sums)
        stacked = torch.stack([sums[n] for n in names])
        dist.all_reduce(stacked)
        return task.eval_finalize(dict(zip(names, stacked.tolist(), strict=True)))

    def _save(self) -> None:
        state: dict[str, Any] = {}
        if self.cfg.rank == 0:
            state = {
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "scaler": self.scaler.state_dict(),
                "micro_batches_consumed": self.step * self.task.grad_accum_steps,
                "setup": {
                    **self._setup(),
                    "world_size": self.cfg.world_size,
                    "backend": self.cfg.backend,
                },
            }
        if self.writer is not None:
            # A resumed attempt never reports the steps a checkpoint covers again: their
            # records must be on disk before it can become the resume point.
            self.writer.sync()
        checkpoint.save(
            self.cfg.checkpoint_dir,
            self.step,
            state,
            rank=self.cfg.rank,
            keep_last=self.cfg.keep_last_checkpoints,
        )
        dist.barrier()  # nobody moves on (or exits) until the checkpoint is complete
        if self.writer is not None:  # every rank's files are in place: the agent uploads them
            lineage = {**state["setup"], "strategy": "ddp"}
            record = checkpoint.artifact_record(self.cfg.checkpoint_dir, self.step, lineage)
            self._record("artifact", **record)

    def _resume(self) -> int:
        path = checkpoint.latest(self.cfg.checkpoint_dir)
        if path is None:
            return 0
        state = checkpoint.load(path, map_location=self.device)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        saved = state["setup"]
        if self.cfg.requested_precision == "auto" and _later_in_chain(
            saved["precision"], self.precision
        ):
            # An earlier attempt already fell back: do not repeat the failure.
            self.precision = saved["precision"]
            self.scaler = make_grad_scaler(self.precision, self.device)
        if saved["precision"] == "fp16" and self.precision == "fp16":
            self.scaler.load_state_dict(state["scaler"])
        step = int(state["step"])
        if saved["world_size"] == self.cfg.world_size:
            checkpoint.restore_rng(self.cfg.checkpoint_dir, step, self.cfg.rank)
        return step

    def _record(self, kind: str, **fields: Any) -> None:
        if self.writer is not None:
            self.writer.write(kind, **fields)
            if kind not in ("metrics", "progress"):
                self.writer.flush()


def _later_in_chain(candidate: str, current: str) -> bool:
    order = ["fp16", "bf16", "fp32"]
    return order.index(candidate) > order.index(current)
