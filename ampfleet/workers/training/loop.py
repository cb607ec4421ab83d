"""The training loop. One optimizer step reads top to bottom in `Trainer.train_step`:
micro-steps under autocast (no_sync until the last), unscale, finite check, clip, step,
update, zero_grad; it returns what it did, and reporting it is `reporting.py`'s. The same
step drives DDP and FSDP (parallel.py wraps the model either way). Around it: resume (onto
any world size and either strategy), evaluation, asynchronous checkpoints, and the precision
fallback (fp16 -> bf16 -> fp32) that `auto` jobs take when the numbers stop being finite. A
runtime-only job (no step count, no epochs) trains until its time is up, then ends like any
other: final evaluation, checkpoint, export.

Its parts live beside it: the data position (data.py), the learning rate (schedule.py),
evaluation and samples (evaluation.py), where an attempt starts (restore.py, resume.py),
reporting (reporting.py), precision and reduction (prepared.py)."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ampfleet.core.accounting import AttemptClock
from ampfleet.workers.heartbeat import Heartbeat, heartbeat_file
from ampfleet.workers.rundir import RecordWriter, RunDir
from ampfleet.workers.start_phases import StartClock
from ampfleet.workers.stored_checkpoints import Stored
from ampfleet.workers.training import checkpoint
from ampfleet.workers.training.allreduce import AllReduceState
from ampfleet.workers.training.data import TrainData, to_device
from ampfleet.workers.training.evaluation import Evaluator
from ampfleet.workers.training.flops import StepFlops, peak_flops
from ampfleet.workers.training.loop_config import LoopConfig
from ampfleet.workers.training.parallel import ParallelModel
from ampfleet.workers.training.precision import autocast
from ampfleet.workers.training.prepared import (
    PrecisionFallbackError,
    PreparedModel,
    TrainingDivergedError,
)
from ampfleet.workers.training.profiling import StepProfiler
from ampfleet.workers.training.reporting import StepOutcome, StepReporter
from ampfleet.workers.training.restore import restore
from ampfleet.workers.training.resume import resume_position
from ampfleet.workers.training.schedule import set_learning_rate
from ampfleet.workers.training.stragglers import StragglerWatch
from ampfleet.workers.training.task import Batch, TrainingTask
from ampfleet.workers.training.timing import StepTimer

# Ranks agree on stopping (preemption), and on starting a requested profile, every this many
# steps: a tiny collective, but on a GPU it is also a host-device sync, so not every step.
STOP_CHECK_EVERY = 10

__all__ = ["LoopConfig", "PrecisionFallbackError", "Trainer", "TrainingDivergedError"]


class Trainer:
    def __init__(
        self,
        task: TrainingTask,
        cfg: LoopConfig,
        writer: RecordWriter | None,
        stop_requested: Callable[[], bool] | None = None,
        start: StartClock | None = None,
    ) -> None:
        self.task = task
        self.start = start
        """The start's phases, until rank 0 reported them after the first step."""
        self.stop_requested = stop_requested or (lambda: False)
        self.cfg = cfg
        self.writer = writer
        self.device = cfg.device
        self.prepared = PreparedModel(
            task.model,
            blocks=task.blocks,
            requested_precision=cfg.requested_precision,
            requested_allreduce_dtype=cfg.requested_allreduce_dtype,
            precision=cfg.precision,
            allreduce_dtype=cfg.allreduce_dtype,
            backend=cfg.backend,
            device=cfg.device,
            world_size=cfg.world_size,
            parallel=cfg.parallel,
            ranks_on_node=cfg.ranks_on_node,
            guard_every_steps=cfg.guard_every_steps,
            guard_threshold=cfg.guard_threshold,
            record=self._record,
        )
        self.model = self.prepared.model
        self.flops = StepFlops(task.grad_accum_steps)
        self.peak = peak_flops(self.device, self.precision)
        self.ddp = self.prepared.module  # what runs forward and backward, DDP or FSDP
        self.optimizer = task.build_optimizer(self.model)
        self.base_lrs = [float(group["lr"]) for group in self.optimizer.param_groups]
        """Each group's rate as built: what a recipe's schedule is a factor of (a checkpoint
        restores the groups' rates as they were at its step)."""
        self.checkpoints = checkpoint.CheckpointManager(
            cfg.checkpoint_dir,
            rank=cfg.rank,
            keep_last=cfg.keep_last_checkpoints,
            # A resumed attempt never reports the steps a checkpoint covers again: their
            # records must be on disk before it can become the resume point.
            before_publish=writer.sync if writer is not None else lambda: None,
            on_published=self._published,
            on_given_up=self._gave_up,
        )
        self.data = TrainData(task, cfg)
        self.evaluator = Evaluator(task, cfg, writer, self._beat)
        steps_per_epoch = max(self.data.per_epoch // task.grad_accum_steps, 1)
        # max_steps 0 (exporting the checkpoint init_from names) is a total, not no total.
        most = math.inf if cfg.max_steps is None else cfg.max_steps
        total = min(most, (cfg.epochs or math.inf) * steps_per_epoch)
        self.total_steps: int | None = None if math.isinf(total) else int(total)
        if self.total_steps is None and cfg.train_until is None:
            raise ValueError("the job has no end: give max_steps, epochs or max_runtime_s")
        self.started = time.monotonic()
        self.time_done = 0.0  # a runtime-only job's share of its time, as the ranks agreed
        self.step = 0
        self.checkpoint_owed = False
        self.preempted = False
        self.batches: Iterator[Batch] = iter(())
        self.clock = AttemptClock(resumed_from=0)
        """Where this attempt's time goes, for goodput; reset once it knows its start."""
        self.heartbeat = (
            Heartbeat(heartbeat_file(cfg.run_dir, cfg.rank)) if cfg.run_dir is not None else None
        )
        """Where this rank says which phase it is in (the node agent's hang detection)."""
        if self.heartbeat is not None:
            self.comm.beat = lambda: self._beat("allreduce", self.step + 1)
        self.profiler = StepProfiler(
            RunDir(cfg.run_dir) if cfg.run_dir is not None else None,
            rank=cfg.rank,
            device=self.device,
            record=self._record,
            setup=self._setup,
        )
        self.reporter = StepReporter(
            rank=cfg.rank,
            world_size=cfg.world_size,
            device=self.device,
            samples_per_step=task.batch_size
            * task.grad_accum_steps
            * cfg.world_size
            * task.samples_per_item,
            flops=self.flops,
            peak=self.peak,
            total_steps=self.total_steps,
            record=self._record,
            stragglers=StragglerWatch(
                cfg.straggler_factor,
                cfg.straggler_reports,
                dict(enumerate(cfg.rank_nodes)),
                sustained_s=cfg.straggler_sustained_s,
            ),
        )

    @property
    def precision(self) -> str:
        return self.prepared.precision

    @property
    def comm(self) -> AllReduceState:
        return self.prepared.comm

    @property
    def parallel(self) -> ParallelModel:
        return self.prepared.parallel

    def _beat(self, phase: str, step: int | None = None) -> None:
        """This rank entered `phase`: of the step it is taking, or after the steps done."""
        if self.heartbeat is not None:
            self.heartbeat.beat(self.step if step is None else step, phase)

    # -- the run --------------------------------------------------------------------------

    def run(self) -> dict[str, float]:
        try:
            return self._run()
        finally:
            self.prepared.close()
            self.checkpoints.close()
            if self.heartbeat is not None:
                self.heartbeat.close()

    def _run(self) -> dict[str, float]:
        restored = self._restore()
        if restored is not None:
            self.prepared.continue_precision_of(restored.setup, restored.scaler)
        self.prepared.choose_auto_allreduce(
            restored.allreduce_auto if restored else None,
            restored.step if restored else None,
            self.cfg.attempt,
        )
        self.clock = AttemptClock(resumed_from=self.step)
        if self.prepared.may_fall_back() and checkpoint.latest(self.cfg.checkpoint_dir) is None:
            self._save()  # the "last good" point a precision fallback returns to
        self._record(
            "started",
            total_steps=self.total_steps,
            resumed_from_step=self.step,
            world_size=self.cfg.world_size,
            backend=self.cfg.backend,
            **self._setup(),
        )
        self.prepared.strategy_event()
        print(
            f"rank {self.cfg.rank}/{self.cfg.world_size} on {self.device} ({self.cfg.backend}): "
            f"{self.precision} compute, {self.comm.dtype_name} AllReduce, "
            f"{self._planned()} from step {self.step}",
            flush=True,
        )
        if self.start is not None:
            self.start.mark("model_build")
        last: dict[str, float] = {}
        while self.total_steps is None or self.step < self.total_steps:
            try:
                with self.clock.stepping():
                    metrics = self.step_once()
            except PrecisionFallbackError as fallback:
                self._fall_back(fallback)
                continue
            if metrics:
                last = metrics
                self.record_usage()
            self._report_start()
            self._after_step()
            if self.step % STOP_CHECK_EVERY != 0:
                continue
            self._beat("stop_check")
            preempted, time_up = self._stop_agreed()
            if preempted:
                # Preempted: leave a checkpoint at this exact step and exit cleanly.
                self.profiler.finish()
                self._save_unless_saved()
                with self.clock.checkpointing():
                    self.checkpoints.wait()
                self.preempted = True
                self.record_usage()
                self._record("preempted", step=self.step)
                return last
            if time_up:
                self._record(
                    "event",
                    reason="runtime_reached",
                    message=f"stop.max_runtime_s is up after step {self.step}: "
                    "evaluating, checkpointing and exporting",
                )
                break
        self.profiler.finish()  # one still capturing as the run ends keeps what it has
        final = self.evaluate()
        self._record("metrics", step=self.step, values=final)
        self._save_unless_saved()
        self.record_usage()
        return {**last, **final}

    def step_once(self) -> dict[str, float]:
        """One optimizer step, reported when it is a step to report: its metrics, else {}."""
        with self.profiler.stepping(self.step + 1):
            outcome = self.train_step()
        if outcome.reporting:
            self._beat("report")
        metrics = self.reporter.report(outcome) if outcome.reporting else {}
        self.profiler.after_step(outcome)
        return metrics

    def train_step(self) -> StepOutcome:
        """One optimizer step, and what it did; nothing is reported here."""
        cfg, task = self.cfg, self.task
        reporting = (self.step + 1) % cfg.log_every_steps == 0 or self.step + 1 == self.total_steps
        timer = StepTimer(
            self.device,
            enabled=reporting or self.profiler.capturing,
            annotate=self.profiler.tracing,
            beat=lambda phase: self._beat(phase, self.step + 1),
        )
        started = time.perf_counter()
        lr = self._begin_step()

        loss_sum = torch.zeros((), device=self.device)
        for micro in range(task.grad_accum_steps):
            last_micro = micro == task.grad_accum_steps - 1
            with timer.phase("data"):
                batch = to_device(next(self.batches), self.device)
            with (
                contextlib.nullcontext() if last_micro else self.parallel.no_sync(),
                self.flops.counting(micro),
            ):
                gathered = self.parallel.times.total()
                with timer.phase("forward"), autocast(self.precision, self.device):
                    loss = task.loss(self.ddp, batch) / task.grad_accum_steps
                timer.move("forward", "comm_exposed", self.parallel.times.total() - gathered)
                reduced = self.parallel.times.total()
                with timer.phase("backward"):
                    self.prepared.backward(loss)
                timer.move("backward", "comm_exposed", self.parallel.times.total() - reduced)
            if last_micro and self.comm.last_launch:
                # Backward returned only once the last bucket's AllReduce was done.
                timer.move(
                    "backward", "allreduce_exposed", time.perf_counter() - self.comm.last_launch
                )
            loss_sum += loss.detach().float()

        with timer.phase("optimizer"):
            grad_norm, _ = self.prepared.finish_step(self.optimizer, task.grad_clip, self.step)
        self.step += 1
        return StepOutcome(
            step=self.step,
            reporting=reporting,
            started=started,
            learning_rate=lr,
            loss_sum=loss_sum,
            grad_norm=grad_norm,
            timer=timer,
            precision=self.precision,
            skipped_steps=self.prepared.skipped_steps,
            allreduce_bytes=self.comm.bytes_this_step,
            allreduce_relative_error=self.comm.last_relative_error,
            loss_scale=self.prepared.loss_scale() if reporting else None,
            fsdp_times=self.prepared.fsdp_times(),
        )

    def _begin_step(self) -> float:
        """Sets this step's learning rate (returned) and readies the communication."""
        lr = set_learning_rate(
            self.task,
            self.optimizer,
            self.base_lrs,
            step=self.step,
            total_steps=self.total_steps,
            time_done=self.time_done,
        )
        self.prepared.begin_step(self.step)
        return lr

    def _after_step(self) -> None:
        cfg = self.cfg
        self.checkpoints.poll()
        self.prepared.report_allreduce_switch()
        if (
            cfg.eval_every_steps
            and self.step % cfg.eval_every_steps == 0
            and (self.total_steps is None or self.step < self.total_steps)
        ):
            # At once: an evaluation is what early stopping acts on (a sweep's pruner, a
            # metric goal), and a rank that goes on training meanwhile wastes its slot.
            self._record_now("metrics", step=self.step, values=self.evaluate())
        if cfg.checkpoint_every_steps and self.step % cfg.checkpoint_every_steps == 0:
            self.checkpoint_owed = True
        # Never checkpoint inside a streak of skipped steps: such a checkpoint holds no
        # progress, and keeping only the last K could push out the last good one.
        if self.checkpoint_owed and self.prepared.nonfinite_streak == 0:
            self._save()
            self.checkpoint_owed = False
        if self.writer is not None:
            self.writer.flush_if_due()

    def _stop_agreed(self) -> tuple[bool, bool]:
        """(preempted, time up). Ranks get the stop signal, and read their clocks, at
        slightly different moments; they must all stop after the same step, and step with
        the same learning rate, so the flags, a runtime-only job's share of its time and
        rank 0's word on a profile request go through one MAX all_reduce."""
        until = self.cfg.train_until
        share = 0.0
        if until is not None:
            share = (time.monotonic() - self.started) / max(until - self.started, 1e-9)
        values = [1.0 if self.stop_requested() else 0.0, share, self.profiler.signal()]
        agreed = torch.tensor(values, device=self.device)
        dist.all_reduce(agreed, op=dist.ReduceOp.MAX)
        preempted, share, profile = agreed.tolist()
        self.time_done = share
        self.profiler.agreed(profile, self.step)
        return bool(preempted), until is not None and share >= 1.0

    def _planned(self) -> str:
        if self.total_steps is not None:
            return f"{self.total_steps} steps"
        until = self.cfg.train_until or self.started
        return f"steps until its time is up ({until - time.monotonic():.0f}s)"

    # -- precision fallback ---------------------------------------------------------------

    def _fall_back(self, fallback: PrecisionFallbackError) -> None:
        previous = self.precision
        self.prepared.fall_back(fallback.target)
        self.optimizer.zero_grad(set_to_none=True)  # the failed step's gradients
        with self.clock.checkpointing():
            self.checkpoints.wait()
        dist.barrier()  # rank 0 has published the last save before anyone looks for it
        # The last good checkpoint, from before the streak of non-finite steps began (none
        # is written inside a streak, and one exists from step 0 on: see `_run`). It was
        # made in an earlier precision than this one, so it has none to continue.
        reached = self.step
        self._restore()
        self.clock.rewound(self.step, reached)
        self._record("rewound", step=self.step)  # the steps after it are reported again
        self._record(
            "event",
            reason="precision_fallback",
            message=f"{previous} -> {self.precision}: {fallback.reason}; resumed from the "
            f"checkpoint at step {self.step}",
        )
        self._record("setup", **self._setup())

    def _setup(self) -> dict[str, str]:
        return self.prepared.setup()

    # -- data, evaluation, checkpoints ----------------------------------------------------

    def evaluate(self) -> dict[str, float]:
        """Every rank scores its shard; the sums are all-reduced, so the result is exact."""
        with self.clock.evaluating():
            return self.evaluator.evaluate(self.model, self.precision, self.step)

    def _save(self) -> None:
        """Starts a checkpoint of this step; training goes on while it is persisted."""
        with self.clock.checkpointing():
            self._snapshot()
        self.clock.saved(self.step)

    def _snapshot(self) -> None:
        # DCP on the first save, not at the start: most of its import is its own.
        from torch.distributed.checkpoint.state_dict import get_state_dict

        self._beat("checkpoint")
        model_state, optimizer_state = get_state_dict(self.model, self.optimizer)
        meta = {
            "micro_batches_consumed": self.step * self.task.grad_accum_steps,
            "micro_batches_per_epoch": self.data.per_epoch,
            "scaler": self.prepared.scaler.state_dict(),
            "allreduce_auto": asdict(auto) if (auto := self.prepared.auto_allreduce) else None,
            "setup": {
                **self._setup(),
                "world_size": self.cfg.world_size,
                "backend": self.cfg.backend,
            },
        }
        self.checkpoints.save(self.step, {"model": model_state, "optimizer": optimizer_state}, meta)

    def _save_unless_saved(self) -> None:
        # The same step twice would have rank 0 publish the first save's folder while the
        # others write the second into it; nothing changed since, so it is already saved.
        if self.checkpoints.last_step != self.step:
            self._save()

    def _published(self, path: Path, step: int, meta: dict[str, Any]) -> None:
        """Rank 0, once a checkpoint is complete: the agent uploads its files."""
        self._record("artifact", **checkpoint.artifact_record(path, step, meta["setup"]))

    def _gave_up(self, steps: list[int], stored: Stored) -> None:
        """Rank 0: keep-last-K deleted checkpoints the store never had (uploads behind)."""
        message = checkpoint.not_uploaded_message(steps, stored, self.cfg.keep_last_checkpoints)
        self._record("event", reason="checkpoint_not_uploaded", message=message)

    def _restore(self) -> checkpoint.Restored | None:
        """Back to the latest checkpoint (or `init_from`'s), or to the start when there is
        none: weights, optimizer, RNG, the step and the data position. What it restored."""
        restored = restore(
            self.cfg, self.model, self.optimizer, self.parallel.strategy, self._record
        )
        self.step = restored.step if restored is not None else 0
        start = 0
        if restored is not None:
            start = resume_position(
                restored, self.task.batch_size, self.cfg.world_size, self.data.per_epoch
            )
        self.batches = self.data.micro_batches(start)
        return restored

    def record_usage(self) -> None:
        """Where this attempt's time went so far (goodput), with the progress records."""
        self._record("usage", **self.clock.record(self.step))

    def _report_start(self) -> None:
        """After the first step of the attempt: where its start went (start_phases.py)."""
        if self.start is not None:
            self.start.mark("first_step")
            self._record("start_phases", **self.start.record())
            self.start = None

    def _record(self, kind: str, **fields: Any) -> None:
        if self.writer is not None:
            self.writer.write(kind, **fields)
            if kind not in ("metrics", "progress", "usage"):
                self.writer.flush()

    def _record_now(self, kind: str, **fields: Any) -> None:
        """A record that leaves at once, whatever its kind."""
        self._record(kind, **fields)
        if self.writer is not None:
            self.writer.flush()
