"""The training set as this rank sees it: its shard of each epoch, in micro-batches, from
wherever a run (or a resumed one) is in it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, DistributedSampler

from ampfleet.workers.training.loop_config import LoopConfig
from ampfleet.workers.training.task import Batch, TrainingTask


def to_device(batch: Batch, device: torch.device) -> Batch:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, list | tuple):
        return type(batch)(to_device(b, device) for b in batch)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    return batch


class TrainData:
    def __init__(self, task: TrainingTask, cfg: LoopConfig) -> None:
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

    @property
    def per_epoch(self) -> int:
        """Micro-batches in one epoch of this rank's shard."""
        return len(self.loader)

    def micro_batches(self, start: int) -> Iterator[Batch]:
        """Endless micro-batches over epochs, starting after `start` consumed ones."""
        epoch, skip = divmod(start, self.per_epoch)
        while True:
            self.sampler.set_epoch(epoch)
            for index, batch in enumerate(self.loader):
                if index >= skip:
                    yield batch
            epoch, skip = epoch + 1, 0
