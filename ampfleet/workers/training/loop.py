"""The training loop: linear on purpose. One optimizer step reads top to bottom:
micro-steps under autocast (no_sync until the last), unscale, finite check, clip, step,
update, zero_grad; then log, evaluate and checkpoint when due."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

from ampfleet.workers.rundir import RecordWriter
from ampfleet.workers.training import checkpoint
from ampfleet.workers.training.comm_hooks import register_allreduce_dtype
from ampfleet.workers.training.precision import autocast, make_grad_scaler
from ampfleet.workers.training.task import Batch, TrainingTask

MAX_CONSECUTIVE_NONFINITE = 10


class TrainingDivergedError(RuntimeError):
    pass


@dataclass(frozen=True)
class LoopConfig:
    max_steps: int | None
    epochs: int | None
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


def _micro_batches(
    loader: DataLoader[Any], sampler: DistributedSampler[Any], start: int
) -> Iterator[Batch]:
    """Endless micro-batches over epochs, starting after `start` already-consumed ones."""
    per_epoch = len(loader)
    epoch, skip = divmod(start, per_epoch)
    while True:
        sampler.set_epoch(epoch)
        for index, batch in enumerate(loader):
            if index >= skip:
                yield batch
        epoch, skip = epoch + 1, 0


def train(  # noqa: PLR0912, PLR0915 - one readable step, top to bottom
    task: TrainingTask, cfg: LoopConfig, writer: RecordWriter | None
) -> dict[str, float]:
    device = cfg.device
    model = task.model.to(device)
    ddp = DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None
    )
    register_allreduce_dtype(ddp, cfg.allreduce_dtype, cfg.backend)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=task.learning_rate, weight_decay=task.weight_decay
    )
    scaler = make_grad_scaler(cfg.precision, device)

    sampler: DistributedSampler[Any] = DistributedSampler(
        task.train_dataset,
        num_replicas=cfg.world_size,
        rank=cfg.rank,
        shuffle=True,
        seed=cfg.seed,
        drop_last=True,
    )
    loader = DataLoader(
        task.train_dataset,
        batch_size=task.batch_size,
        sampler=sampler,
        drop_last=True,
        collate_fn=task.collate_fn,
    )
    if len(loader) < 1:
        raise ValueError("the training set is smaller than one batch per rank")
    accum = task.grad_accum_steps
    steps_per_epoch = max(len(loader) // accum, 1)
    total = min(cfg.max_steps or math.inf, (cfg.epochs or math.inf) * steps_per_epoch)
    total_steps = int(total)

    step = _resume(cfg, ddp, optimizer, scaler)
    batches = _micro_batches(loader, sampler, start=step * accum)
    if writer:
        writer.write(
            "started",
            total_steps=total_steps,
            resumed_from_step=step,
            precision=cfg.precision,
            allreduce_dtype=cfg.allreduce_dtype,
            world_size=cfg.world_size,
            backend=cfg.backend,
        )
        writer.flush()

    nonfinite_in_a_row = 0
    skipped_steps = 0
    last: dict[str, float] = {}
    while step < total_steps:
        started = time.perf_counter()
        lr = lr_at(step, base=task.learning_rate, warmup=task.warmup_steps, total=total_steps)
        for group in optimizer.param_groups:
            group["lr"] = lr

        loss_sum = torch.zeros((), device=device)
        for micro in range(accum):
            batch = to_device(next(batches), device)
            sync = ddp.no_sync() if micro < accum - 1 else contextlib.nullcontext()
            with sync:
                with autocast(cfg.precision, device):
                    loss = task.loss(ddp, batch) / accum
                scaler.scale(loss).backward()
            loss_sum += loss.detach().float()

        scaler.unscale_(optimizer)
        # Gradients are identical on every rank after the AllReduce, so every rank takes
        # the same decision here without another collective.
        grad_norm = torch.nn.utils.clip_grad_norm_(
            model.parameters(), task.grad_clip if task.grad_clip else math.inf
        )
        if not torch.isfinite(grad_norm):
            nonfinite_in_a_row += 1
            skipped_steps += 1
            if cfg.precision != "fp16" and nonfinite_in_a_row >= MAX_CONSECUTIVE_NONFINITE:
                raise TrainingDivergedError(
                    f"gradients were non-finite for {nonfinite_in_a_row} steps in a row at step "
                    f"{step} under {cfg.precision}: lower the learning rate or clip harder"
                )
            if cfg.precision != "fp16":
                optimizer.zero_grad(set_to_none=True)
                step += 1
                continue
        else:
            nonfinite_in_a_row = 0
        scaler.step(optimizer)  # under fp16 skips the step itself when gradients overflowed
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        step += 1

        if step % cfg.log_every_steps == 0 or step == total_steps:
            dist.all_reduce(loss_sum)
            step_time = time.perf_counter() - started
            last = {
                "loss": loss_sum.item() / cfg.world_size,
                "learning_rate": lr,
                "grad_norm": float(grad_norm),
                "step_time_s": step_time,
                "samples_per_s": task.batch_size
                * accum
                * cfg.world_size
                * task.samples_per_item
                / step_time,
                "skipped_steps": float(skipped_steps),
            }
            if cfg.precision == "fp16":
                last["loss_scale"] = float(scaler.get_scale())
            if writer:
                writer.write("metrics", step=step, values=last)
                writer.write("progress", step=step, total_steps=total_steps)

        if cfg.eval_every_steps and step % cfg.eval_every_steps == 0 and step < total_steps:
            _report_eval(task, ddp, cfg, step, writer)
        if cfg.checkpoint_every_steps and step % cfg.checkpoint_every_steps == 0:
            _save(cfg, step, model, optimizer, scaler)

    final = _report_eval(task, ddp, cfg, step, writer)
    _save(cfg, step, model, optimizer, scaler)
    return {**last, **final}


def _report_eval(
    task: TrainingTask,
    ddp: DistributedDataParallel,
    cfg: LoopConfig,
    step: int,
    writer: RecordWriter | None,
) -> dict[str, float]:
    values = evaluate(task, ddp, cfg)
    if writer and values:
        writer.write("metrics", step=step, values=values)
        writer.flush()
    return values


@torch.no_grad()
def evaluate(task: TrainingTask, ddp: DistributedDataParallel, cfg: LoopConfig) -> dict[str, float]:
    """Every rank scores its shard; the sums are all-reduced, so the result is exact."""
    if task.val_dataset is None:
        return {}
    sampler: DistributedSampler[Any] = DistributedSampler(
        task.val_dataset, num_replicas=cfg.world_size, rank=cfg.rank, shuffle=False
    )
    loader = DataLoader(
        task.val_dataset, batch_size=task.batch_size, sampler=sampler, collate_fn=task.collate_fn
    )
    model = ddp.module
    was_training = model.training
    model.eval()
    sums: dict[str, torch.Tensor] = {}
    for index, batch in enumerate(loader):
        if task.eval_max_batches is not None and index >= task.eval_max_batches:
            break
        with autocast(cfg.precision, cfg.device):
            for name, value in task.eval_step(model, to_device(batch, cfg.device)).items():
                sums[name] = sums.get(name, torch.zeros((), device=cfg.device)) + value.float()
    model.train(was_training)
    # DistributedSampler pads the last shard by repeating samples: a rank with no batch
    # still takes part in the all_reduce with zeros, so keys must match on every rank.
    names = sorted(sums)
    stacked = torch.stack([sums[n] for n in names]) if names else torch.zeros(0, device=cfg.device)
    dist.all_reduce(stacked)
    return task.eval_finalize({n: float(v) for n, v in zip(names, stacked.tolist(), strict=True)})


def _state(
    cfg: LoopConfig,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
) -> dict[str, Any]:
    return {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scaler": scaler.state_dict(),
        "setup": {
            "precision": cfg.precision,
            "allreduce_dtype": cfg.allreduce_dtype,
            "world_size": cfg.world_size,
            "backend": cfg.backend,
        },
    }


def _save(
    cfg: LoopConfig,
    step: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
) -> None:
    state = _state(cfg, model, optimizer, scaler) if cfg.rank == 0 else {}
    checkpoint.save(
        cfg.checkpoint_dir, step, state, rank=cfg.rank, keep_last=cfg.keep_last_checkpoints
    )
    dist.barrier()  # nobody moves on (or exits) until the checkpoint is complete


def _resume(
    cfg: LoopConfig,
    ddp: DistributedDataParallel,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
) -> int:
    path = checkpoint.latest(cfg.checkpoint_dir)
    if path is None:
        return 0
    state = checkpoint.load(path, map_location=cfg.device)
    ddp.module.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    if state["setup"]["precision"] == "fp16" and cfg.precision == "fp16":
        scaler.load_state_dict(state["scaler"])
    step = int(state["step"])
    if state["setup"]["world_size"] == cfg.world_size:
        checkpoint.restore_rng(cfg.checkpoint_dir, step, cfg.rank)
    return step
