"""The learning rate of each step: the recipe's own schedule (a factor of each parameter
group's rate as built), or the platform's linear warmup and cosine decay."""

from __future__ import annotations

import math

import torch

from ampfleet.workers.training.task import TrainingTask


def lr_at(step: int, *, base: float, warmup: int, progress: float) -> float:
    """Linear warmup over `warmup` steps, then cosine decay to 10% of the base rate as
    `progress` (the share done of the steps after warmup, or of a runtime-only job's time)
    goes from 0 to 1."""
    if warmup and step < warmup:
        return base * (step + 1) / warmup
    return base * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(max(progress, 0.0), 1.0))))


def set_learning_rate(
    task: TrainingTask,
    optimizer: torch.optim.Optimizer,
    base_lrs: list[float],
    *,
    step: int,
    total_steps: int | None,
    time_done: float,
) -> float:
    """This step's rate on every parameter group; returns the first group's. `time_done`:
    a runtime-only job's share of its time (`total_steps` None)."""
    groups = optimizer.param_groups
    if task.lr_schedule is not None:
        done = time_done if total_steps is None else step / total_steps
        factor = task.lr_schedule(step, done)
        for group, base in zip(groups, base_lrs, strict=True):
            group["lr"] = base * factor
        return float(groups[0]["lr"])
    if total_steps is None:
        progress = time_done
    else:
        progress = (step - task.warmup_steps) / max(total_steps - task.warmup_steps, 1)
    lr = lr_at(step, base=task.learning_rate, warmup=task.warmup_steps, progress=progress)
    for group in groups:
        group["lr"] = lr
    return lr
