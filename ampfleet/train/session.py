"""A script's session: the job's precision, sharding, reduction, reporting and checkpoints
applied to the script's own model, optimizer and loop.

What the session does is the built-in loop's, from the same pieces: `PreparedModel`
(prepared.py: strategy, reduction and its guard, scaler, a step's tail and the `auto`
fallback), `StepReporter` and `StepTimer` (a reported step's metrics, its time by phase),
`CheckpointManager` (asynchronous DCP checkpoints published for the node agent to upload),
`AttemptClock` (goodput) and the heartbeat (hang detection). The script keeps its data,
its optimizer and its learning-rate schedule.

Every rank calls every method, at the same steps: `prepare`, `report`, `save`, `restore`
and `should_stop` are collective. Only rank 0 writes records.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.optim import Optimizer

from ampfleet.core.accounting import AttemptClock
from ampfleet.train.job import RankJob
from ampfleet.train.stopping import StopSignals
from ampfleet.workers.heartbeat import Heartbeat, heartbeat_file
from ampfleet.workers.records import MAX_METRICS, METRIC_NAME_PATTERN
from ampfleet.workers.rundir import RecordWriter
from ampfleet.workers.stored_checkpoints import Stored
from ampfleet.workers.training import checkpoint
from ampfleet.workers.training.flops import StepFlops, peak_flops
from ampfleet.workers.training.group import nodes_of_ranks
from ampfleet.workers.training.initial import start_from
from ampfleet.workers.training.loop import STOP_CHECK_EVERY
from ampfleet.workers.training.parallel import ParallelConfig
from ampfleet.workers.training.precision import (
    autocast,
    resolve_allreduce_dtype,
    resolve_precision,
)
from ampfleet.workers.training.prepared import PrecisionFallbackError, PreparedModel
from ampfleet.workers.training.rank import train_until
from ampfleet.workers.training.reporting import StepOutcome, StepReporter
from ampfleet.workers.training.stragglers import StragglerWatch
from ampfleet.workers.training.timing import StepTimer

MAX_REPORTED_VALUES = MAX_METRICS // 2
"""A script's own values in one report; the platform adds its own (per-rank ones among
them) to the same record."""


class Session:
    """Made by `ampfleet.train.init()`; see the package's docstring for a script's shape."""

    def __init__(self, job: RankJob, device: torch.device, backend: str) -> None:
        spec = job.spec
        self.job = job
        self.device = device
        self.backend = backend
        self.rank = job.rank
        self.world_size = job.world_size
        self.requested_precision = spec.precision.value
        self.precision = resolve_precision(self.requested_precision, device)
        """The compute precision; after `prepare`, the prepared model's (a fallback moves it)."""
        self.allreduce_dtype = resolve_allreduce_dtype(
            spec.allreduce_dtype.value, self.precision, backend
        )
        self.total_steps: int | None = spec.stop.max_steps
        self.train_until = train_until(spec.stop, time.monotonic())
        self.started = time.monotonic()
        self.steps_completed = 0
        """Optimizer steps taken (skipped ones included), from the restored checkpoint's."""
        self.covered = 0
        """The step of the checkpoint last restored (a resume, a fallback): it covers every
        report up to it, which the timeline that reported them has stored."""
        self.writer = (
            RecordWriter(job.run_dir.events_file, job.metrics_flush_s) if self.rank == 0 else None
        )
        self.signals = StopSignals()
        self.signals.install()
        self.heartbeat = Heartbeat(heartbeat_file(job.run_dir.path, self.rank))
        self.clock = AttemptClock(resumed_from=0)
        self.checkpoints = checkpoint.CheckpointManager(
            job.checkpoint_dir,
            rank=self.rank,
            keep_last=spec.checkpoint.keep_last,
            # No resume point may cover a step whose records could still be lost.
            before_publish=self.writer.sync if self.writer is not None else lambda: None,
            on_published=self._published,
            on_given_up=self._gave_up,
        )
        self.rank_nodes = nodes_of_ranks(job.node)
        self.prepared: PreparedModel | None = None
        self.optimizer: Optimizer | None = None
        self.grad_clip: float | None = None
        self.state: Mapping[str, Any] | None = None
        """What the script last saved or restored: a fallback and a preemption save it."""
        self.reporter: StepReporter | None = None
        self.flops = StepFlops(1)
        self._counting: contextlib.ExitStack | None = None
        self._timer: StepTimer | None = None
        self._step_started: float | None = None
        self._last_step_end = time.perf_counter()
        self._outcome: StepOutcome | None = None
        self._save_owed = False
        self._stop_checked_at = 0
        self._stopping = False
        self._closed = False
        atexit.register(self._close_at_exit)

    def begin(self) -> None:
        """Rank 0 takes over the records from the script's wrapper (the marker), then says
        what the job computes in; `prepare` says it again with the strategy."""
        if self.rank == 0:
            self.job.run_dir.session_marker.touch(exist_ok=True)
        self._record("setup", precision=self.precision, allreduce_dtype=self.allreduce_dtype)

    # -- preparing ------------------------------------------------------------------------

    def prepare(
        self,
        model: nn.Module,
        optimizer: Optimizer,
        *,
        grad_clip: float | None = None,
        batch_size: int | None = None,
        blocks: list[nn.Module] | None = None,
    ) -> tuple[nn.Module, Optimizer]:
        """The model as the job runs it (DDP's wrapper, or the model FSDP sharded in place),
        and the same optimizer, now over the prepared parameters. `grad_clip`: the gradient
        norm `step` clips to; `batch_size`: per rank, for samples/s; `blocks`: the modules
        FSDP shards one by one (default: the model's top-level children)."""
        if self.prepared is not None:
            raise RuntimeError("prepare() was called already: one model per session")
        if optimizer.state:
            raise ValueError(
                "prepare() takes a fresh optimizer: its state is restored with restore()"
            )
        lowered = [n for n, p in model.named_parameters() if p.dtype != torch.float32]
        if lowered:
            raise ValueError(
                f"parameters {', '.join(lowered[:3])} are not fp32: the platform keeps fp32 "
                f"master weights and computes in the job's precision ({self.precision}) "
                "under autocast; leave the model in fp32"
            )
        names = {id(p): n for n, p in model.named_parameters()}
        if any(id(p) not in names for group in optimizer.param_groups for p in group["params"]):
            raise ValueError("the optimizer steps parameters that are not the model's")
        groups = [[names[id(p)] for p in group["params"]] for group in optimizer.param_groups]
        spec = self.job.spec
        prepared = PreparedModel(
            model,
            blocks=blocks,
            requested_precision=self.requested_precision,
            requested_allreduce_dtype=spec.allreduce_dtype.value,
            precision=self.precision,
            allreduce_dtype=self.allreduce_dtype,
            backend=self.backend,
            device=self.device,
            world_size=self.world_size,
            parallel=ParallelConfig.from_spec(spec.parallelism),
            ranks_on_node=self.job.local_world_size,
            record=self._record,
        )
        # FSDP replaced the parameters with its shards: the optimizer steps those, by name.
        now = dict(prepared.model.named_parameters())
        for group, named in zip(optimizer.param_groups, groups, strict=True):
            group["params"] = [now[name] for name in named]
        self.prepared, self.optimizer, self.grad_clip = prepared, optimizer, grad_clip
        prepared.comm.beat = lambda: self._beat("allreduce")
        self._adopt_latest_checkpoint_setup(prepared)
        prepared.strategy_event()
        self.precision = prepared.precision
        self._record("setup", **prepared.setup())
        self.reporter = StepReporter(
            rank=self.rank,
            world_size=self.world_size,
            device=self.device,
            samples_per_step=(batch_size or 0) * self.world_size,
            flops=self.flops,
            peak=peak_flops(self.device, self.precision),
            total_steps=self.total_steps,
            record=self._record,
            stragglers=StragglerWatch(
                spec.monitoring.straggler_factor,
                spec.monitoring.straggler_reports,
                dict(enumerate(self.rank_nodes)),
                sustained_s=spec.monitoring.straggler_sustained_s,
            ),
        )
        return prepared.module, optimizer

    def _adopt_latest_checkpoint_setup(self, prepared: PreparedModel) -> None:
        """What the checkpoint a restore will resume was made under: an `auto` job keeps its
        fallback and fp16 its loss scale, and `allreduce_dtype: auto` keeps its choice (or
        measures, here, before the first step). Every rank reads the same file."""
        latest = checkpoint.latest(self.job.checkpoint_dir)
        initial = self.job.initial
        if latest is None and initial is not None and initial.load == "full":
            latest = initial.path  # continuing another job: its precision and choices too
        meta = checkpoint.read_meta(latest) if latest is not None else None
        if meta is not None:
            prepared.continue_precision_of(meta["setup"], meta["scaler"])
        prepared.choose_auto_allreduce(
            meta.get("allreduce_auto") if meta else None,
            int(meta["step"]) if meta else None,
            self.job.attempt,
        )

    def _ready(self) -> tuple[PreparedModel, Optimizer]:
        if self.prepared is None or self.optimizer is None:
            raise RuntimeError("call session.prepare(model, optimizer) first")
        return self.prepared, self.optimizer

    # -- a step ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def autocast(self) -> Iterator[None]:
        """The forward pass in the job's compute precision (fp32 master weights stay)."""
        prepared, _ = self._ready()
        timer = self._begin_step()
        if self.flops.per_step is None and self._counting is None:
            self._counting = contextlib.ExitStack()  # the first forward and its backward
            self._counting.enter_context(self.flops.counting(0))
        gathered = prepared.parallel.times.total()
        with timer.phase("forward"), autocast(prepared.precision, self.device):
            yield
        timer.move("forward", "comm_exposed", prepared.parallel.times.total() - gathered)

    def no_sync(self) -> contextlib.AbstractContextManager[None]:
        """Gradient accumulation: backward passes under it reduce nothing; the last one of
        the step runs outside it."""
        prepared, _ = self._ready()
        return prepared.parallel.no_sync()

    def backward(self, loss: torch.Tensor) -> None:
        """`loss.backward()`, scaled for fp16."""
        prepared, _ = self._ready()
        timer = self._begin_step()
        reduced = prepared.parallel.times.total()
        with timer.phase("backward"):
            prepared.backward(loss)
        timer.move("backward", "comm_exposed", prepared.parallel.times.total() - reduced)
        if prepared.comm.last_launch:
            # Backward returned only once the last bucket's AllReduce was done.
            exposed = time.perf_counter() - prepared.comm.last_launch
            timer.move("backward", "allreduce_exposed", exposed)
        self._stop_counting()

    def step(self) -> bool:
        """The optimizer's step after the backward: unscale, the finite check, clip, step,
        the scaler's update, zero_grad. False where the step changed no weight (non-finite
        gradients), or where a fallback of `auto` precision went back to the last
        checkpoint (`steps_completed` says where the run is)."""
        prepared, optimizer = self._ready()
        timer = self._begin_step()
        self._stop_counting()
        try:
            with timer.phase("optimizer"):
                grad_norm, finite = prepared.finish_step(
                    optimizer, self.grad_clip, self.steps_completed
                )
        except PrecisionFallbackError as fallback:
            self._end_step()
            self._fall_back(fallback)
            return False
        self.steps_completed += 1
        self._outcome = StepOutcome(
            step=self.steps_completed,
            reporting=timer.enabled,
            started=self._step_started or time.perf_counter(),
            learning_rate=float(optimizer.param_groups[0]["lr"]),
            loss_sum=None,
            grad_norm=grad_norm,
            timer=timer,
            precision=prepared.precision,
            skipped_steps=prepared.skipped_steps,
            allreduce_bytes=prepared.comm.bytes_this_step,
            allreduce_relative_error=prepared.comm.last_relative_error,
            loss_scale=prepared.loss_scale(),
            fsdp_times=prepared.fsdp_times(),
        )
        self._end_step()
        if self.writer is not None:
            self.writer.flush_if_due()
        self.checkpoints.poll()
        prepared.report_allreduce_switch()
        if self._save_owed and finite and self.state is not None:
            self.save(self.state)
        return finite

    def _begin_step(self) -> StepTimer:
        """The step's timer, begun at its first forward (or backward, or step): the time
        since the last step ended is the script's data loading."""
        if self._timer is not None:
            return self._timer
        prepared, _ = self._ready()
        now = time.perf_counter()
        if self.clock.first_step_at is None:  # what came before was start-up
            self.clock.first_step_at = time.time()
            self._last_step_end = now
        self._step_started = self._last_step_end
        step = self.steps_completed + 1
        log_every = self.job.spec.log_every_steps
        # On a GPU timing synchronises the device: only steps to report are timed.
        timed = step % log_every == 0 or step == self.total_steps or self.device.type == "cpu"
        self._timer = StepTimer(self.device, enabled=timed, beat=self._beat)
        if timed:
            self._timer.add("data", now - self._last_step_end)
        prepared.begin_step(self.steps_completed)
        return self._timer

    def _end_step(self) -> None:
        now = time.perf_counter()
        self.clock.step_s += now - (self._step_started or now)
        self._last_step_end = now
        self._timer = None

    def _stop_counting(self) -> None:
        if self._counting is not None:
            self._counting.close()
            self._counting = None

    # -- reporting ------------------------------------------------------------------------

    def report(self, step: int, metrics: Mapping[str, float | torch.Tensor]) -> None:
        """The step's metrics (a `metrics` record, with the platform's own: loss averaged
        over the ranks, gradient norm, learning rate, AMP health, step time by phase, MFU)
        and the job's progress. Collective: every rank reports the same steps. Values other
        than `loss` are rank 0's. A step the restored checkpoint covers is not reported
        again (its points are stored from the attempt that reported them)."""
        if step <= self.covered:
            return
        values = _checked_values(metrics)
        loss = values.pop("loss", None)
        self._beat("report")
        outcome = self._outcome
        if self.reporter is None or outcome is None:
            extra = values if loss is None else {"loss": loss, **values}
            self._record("metrics", step=step, values=extra)
            self._record("progress", step=step, total_steps=self.total_steps)
        else:
            loss_sum = None if loss is None else torch.tensor(loss, device=self.device)
            self.reporter.report(dataclasses.replace(outcome, step=step, loss_sum=loss_sum), values)
        self._record("usage", **self.clock.record(self.steps_completed))

    # -- checkpoints ----------------------------------------------------------------------

    def save(self, state: Mapping[str, Any]) -> None:
        """Checkpoints `state` at `steps_completed`: the prepared model and optimizer (by
        the platform, sharded and reshardable), and any other entry by name: an object with
        `state_dict`/`load_state_dict` (an LR scheduler), a tensor, a number or a string.
        Training goes on while it is written; once complete it is published and uploaded.
        Collective. A step already saved is not saved again."""
        self.state = state
        prepared, optimizer = self._ready()
        if prepared.nonfinite_streak:
            # Not inside a streak of skipped steps: such a checkpoint holds no progress, and
            # keeping the last K could push out the last good one. Saved after the streak.
            self._save_owed = True
            return
        self._save_owed = False
        if self.checkpoints.last_step == self.steps_completed:
            return
        self._beat("checkpoint")
        began = time.perf_counter()
        with self.clock.checkpointing():
            model_state, optimizer_state = get_state_dict(prepared.model, optimizer)
            meta = {
                "scaler": prepared.scaler.state_dict(),
                "allreduce_auto": asdict(auto) if (auto := prepared.auto_allreduce) else None,
                "setup": {
                    **prepared.setup(),
                    "world_size": self.world_size,
                    "backend": self.backend,
                },
            }
            entries = {**self._other_entries(state), "model": model_state}
            self.checkpoints.save(
                self.steps_completed, {**entries, "optimizer": optimizer_state}, meta
            )
        self.clock.saved(self.steps_completed)
        self._last_step_end += time.perf_counter() - began  # not the next step's data time

    def restore(self, state: Mapping[str, Any]) -> int:
        """Loads the job's latest checkpoint into `state` (as `save` takes it: the model and
        optimizer, the other entries in place) and returns its step, the step to continue
        after; 0 where there is none yet (a first attempt). It may have been made on another
        world size or strategy. Collective."""
        self.state = state
        prepared, _ = self._ready()
        step = self._load(state)
        self.clock = AttemptClock(resumed_from=step or 0)
        if step is None and prepared.may_fall_back():
            self.save(state)  # the "last good" point a precision fallback returns to
        if step:
            # A resumed timeline: what an earlier attempt reported past it is replaced.
            self._record("rewound", step=step)
        return step or 0

    def _load(self, state: Mapping[str, Any]) -> int | None:
        prepared, optimizer = self._ready()
        extra = self._other_entries(state)
        restored = checkpoint.restore_latest(
            self.job.checkpoint_dir,
            prepared.model,
            optimizer,
            rank=self.rank,
            world_size=self.world_size,
            extra=extra,
        )
        if restored is None and self.job.initial is not None:
            restored = start_from(
                self.job.initial,
                prepared.model,
                optimizer,
                rank=self.rank,
                world_size=self.world_size,
                extra=extra if self.job.initial.load == "full" else None,
            )
            self._record("event", reason="initialized", message=self.job.initial.describe())
        if restored is None:
            return None
        if isinstance(state, dict):  # the values DCP does not load in place
            state.update({k: v for k, v in extra.items() if not _stateful(v)})
        self.steps_completed = self.covered = restored.step
        self.checkpoints.last_step = None  # the step may be saved again, from other weights
        return restored.step

    def _other_entries(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """`state` without the prepared model and optimizer, which the platform saves."""
        prepared, optimizer = self._ready()
        ours = {id(prepared.model), id(prepared.module), id(optimizer)}
        other = {name: value for name, value in state.items() if id(value) not in ours}
        taken = {"model", "optimizer"} & other.keys()
        if taken:
            raise ValueError(
                f"state names {sorted(taken)} for something other than the prepared model and "
                "optimizer: those names are the platform's"
            )
        return other

    def _published(self, path: Path, step: int, meta: dict[str, Any]) -> None:
        """Rank 0, once a checkpoint is complete: the agent uploads its files."""
        self._record("artifact", **checkpoint.artifact_record(path, step, meta["setup"]))

    def _gave_up(self, steps: list[int], stored: Stored) -> None:
        keep_last = self.job.spec.checkpoint.keep_last
        message = checkpoint.not_uploaded_message(steps, stored, keep_last)
        self._record("event", reason="checkpoint_not_uploaded", message=message)

    # -- precision fallback ---------------------------------------------------------------

    def _fall_back(self, fallback: PrecisionFallbackError) -> None:
        """`auto` precision after a streak of non-finite steps: on in the next precision,
        from the last checkpoint (from before the streak: none is saved inside one)."""
        prepared, optimizer = self._ready()
        previous = prepared.precision
        prepared.fall_back(fallback.target)
        self.precision = prepared.precision
        optimizer.zero_grad(set_to_none=True)  # the failed step's gradients
        with self.clock.checkpointing():
            self.checkpoints.wait()
        dist.barrier()  # rank 0 has published the last save before anyone looks for it
        reached = self.steps_completed
        restored = self._load(self.state) if self.state is not None else None
        if restored is None:
            where = f"went on from step {reached}: no checkpoint to return to"
        else:
            self.clock.rewound(restored, reached)
            self._record("rewound", step=restored)  # the steps after it are reported again
            where = f"resumed from the checkpoint at step {restored}"
        self._record(
            "event",
            reason="precision_fallback",
            message=f"{previous} -> {prepared.precision}: {fallback.reason}; {where}",
        )
        self._record("setup", **prepared.setup())

    # -- stopping -------------------------------------------------------------------------

    def should_stop(self) -> bool:
        """Whether the script should stop now: stop.max_steps reached, or the ranks agreed
        to stop (a preemption or cancel signalled a rank, or a runtime-only job's time is
        up). The agreement is one small collective every few steps; call it on every rank
        after each step. When preempted, the session has checkpointed what the script last
        saved or restored at this step, and written the record the node agent waits for."""
        if self._stopping:
            return True
        if self.total_steps is not None and self.steps_completed >= self.total_steps:
            return True
        if self.steps_completed - self._stop_checked_at < STOP_CHECK_EVERY:
            return False
        self._stop_checked_at = self.steps_completed
        self._beat("stop_check")
        share = 0.0
        if self.train_until is not None:
            share = (time.monotonic() - self.started) / max(self.train_until - self.started, 1e-9)
        signalled = 1.0 if self.signals.requested.is_set() else 0.0
        agreed = torch.tensor([signalled, share], device=self.device)
        dist.all_reduce(agreed, op=dist.ReduceOp.MAX)
        preempted, share = agreed.tolist()
        if preempted:
            self._stopping = True
            if self.state is not None:
                self.save(self.state)
            with self.clock.checkpointing():
                self.checkpoints.wait()
            self._record("usage", **self.clock.record(self.steps_completed))
            self._record("preempted", step=self.steps_completed)
        elif share >= 1.0:
            self._stopping = True
            self._record(
                "event",
                reason="runtime_reached",
                message=f"stop.max_runtime_s is up after step {self.steps_completed}",
            )
        return self._stopping

    # -- the end --------------------------------------------------------------------------

    def close(self) -> None:
        """Waits for the checkpoint in flight to be published and lets go of what the
        session holds; before the script leaves the process group. Collective."""
        if self._closed:
            return
        self._closed = True
        try:
            self.checkpoints.close()
        finally:
            if self.prepared is not None:
                self.prepared.close()
            # The script leaves the process group next: nothing here may still hold it
            # (DDP's wrapper does, in reference cycles that only a collection frees).
            self.prepared, self.optimizer = None, None
            self.heartbeat.close()
            self.signals.uninstall()
            if self.writer is not None:
                self.writer.close()
            atexit.unregister(self._close_at_exit)

    def _close_at_exit(self) -> None:
        """A script that never closed its session: the records are flushed at least (its
        process group may be gone, so the checkpoint's own group cannot be let go)."""
        with contextlib.suppress(Exception):
            self.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- records --------------------------------------------------------------------------

    def _beat(self, phase: str) -> None:
        self.heartbeat.beat(self.steps_completed + 1, phase)

    def _record(self, kind: str, **fields: Any) -> None:
        if self.writer is not None:
            self.writer.write(kind, **fields)
            if kind not in ("metrics", "progress", "usage"):
                self.writer.flush()


def _stateful(value: object) -> bool:
    return callable(getattr(value, "state_dict", None)) and callable(
        getattr(value, "load_state_dict", None)
    )


def _checked_values(metrics: Mapping[str, float | torch.Tensor]) -> dict[str, float]:
    """The values as the records hold them; a name the node agent would refuse is refused
    here, where the script can still be told, rather than lose the whole record."""
    if len(metrics) > MAX_REPORTED_VALUES:
        raise ValueError(f"report() takes at most {MAX_REPORTED_VALUES} values at a time")
    values = {}
    for name, value in metrics.items():
        if not isinstance(name, str) or not re.fullmatch(METRIC_NAME_PATTERN, name):
            raise ValueError(
                f"metric name {name!r}: letters, digits and _ . / : - (64 at most, not "
                "starting with a punctuation mark)"
            )
        # A tensor is read back: a host-device sync on a GPU.
        number = value.detach().float().mean() if isinstance(value, torch.Tensor) else value
        values[name] = float(number)
    return values
