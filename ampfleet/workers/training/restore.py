"""Where an attempt starts: the job's latest checkpoint (onto any world size and either
strategy), else the checkpoint `init_from` names, else the beginning. Resharding is said
in an event, since the data position is then recomputed rather than carried over."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ampfleet.workers.training import checkpoint
from ampfleet.workers.training.initial import start_from
from ampfleet.workers.training.loop_config import LoopConfig

Record = Callable[..., None]


def restore(
    cfg: LoopConfig,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    strategy: str,
    record: Record,
) -> checkpoint.Restored | None:
    """Weights, optimizer, RNG and what the checkpoint recorded; None: start from scratch."""
    restored = checkpoint.restore_latest(
        cfg.checkpoint_dir, model, optimizer, rank=cfg.rank, world_size=cfg.world_size
    )
    if restored is None and cfg.initial is not None:
        restored = start_from(
            cfg.initial, model, optimizer, rank=cfg.rank, world_size=cfg.world_size
        )
        record("event", reason="initialized", message=cfg.initial.describe())
    if restored is not None:
        _record_resharding(restored, cfg.world_size, strategy, record)
    return restored


def _record_resharding(
    restored: checkpoint.Restored, world_size: int, strategy: str, record: Record
) -> None:
    saved: dict[str, Any] = restored.setup
    changed = {
        what: (saved.get(what), now)
        for what, now in (("world_size", world_size), ("strategy", strategy))
        if saved.get(what) != now
    }
    if changed:
        record(
            "event",
            reason="resharded",
            message=f"resumed the checkpoint of step {restored.step} "
            + ", ".join(f"{what} {old} -> {new}" for what, (old, new) in changed.items())
            + "; the data position is recomputed for the new world size",
        )
