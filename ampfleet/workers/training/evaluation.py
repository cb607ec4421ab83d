"""Evaluation during and after training: every rank scores its shard of the validation set
and the sums are all-reduced, so the result is exact whatever the world size; a task that
writes samples (a language model's generations for fixed prompts) writes them too, and rank
0 keeps them as an artifact of the step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from ampfleet.core.artifact_names import SAMPLE_KIND, samples_name
from ampfleet.workers.rundir import RecordWriter
from ampfleet.workers.training.data import to_device
from ampfleet.workers.training.loop_config import LoopConfig
from ampfleet.workers.training.outputs import atomic_write, described, write_artifact_records
from ampfleet.workers.training.precision import autocast
from ampfleet.workers.training.task import TrainingTask


class Evaluator:
    def __init__(
        self,
        task: TrainingTask,
        cfg: LoopConfig,
        writer: RecordWriter | None,
        beat: Callable[[str], None],
    ) -> None:
        self.task = task
        self.cfg = cfg
        self.writer = writer
        self.beat = beat

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module, precision: str, step: int) -> dict[str, float]:
        """The validation metrics of `model` at `step` ({} without a validation set)."""
        task = self.task
        if task.val_dataset is None and task.samples is None:
            return {}
        self.beat("evaluate")
        was_training = model.training
        model.eval()
        try:
            metrics = {}
            if task.val_dataset is not None:
                metrics = self._score(model, precision, task.val_dataset)
            if task.samples is not None:
                with autocast(precision, self.cfg.device):
                    text = task.samples(model)
                self._keep_samples(text, step)
        finally:
            model.train(was_training)
        return metrics

    def _score(
        self, model: torch.nn.Module, precision: str, dataset: Dataset[Any]
    ) -> dict[str, float]:
        task, cfg = self.task, self.cfg
        sampler: DistributedSampler[Any] = DistributedSampler(
            dataset, num_replicas=cfg.world_size, rank=cfg.rank, shuffle=False
        )
        loader = DataLoader(
            dataset, batch_size=task.batch_size, sampler=sampler, collate_fn=task.collate_fn
        )
        sums: dict[str, torch.Tensor] = {}
        for index, batch in enumerate(loader):
            if task.eval_max_batches is not None and index >= task.eval_max_batches:
                break
            with autocast(precision, cfg.device):
                scored = task.eval_step(model, to_device(batch, cfg.device))
            for name, value in scored.items():
                sums[name] = sums.get(name, torch.zeros((), device=cfg.device)) + value.float()
        names = sorted(sums)
        stacked = torch.stack([sums[n] for n in names])
        dist.all_reduce(stacked)
        return task.eval_finalize(dict(zip(names, stacked.tolist(), strict=True)))

    def _keep_samples(self, text: str, step: int) -> None:
        """Rank 0: the evaluation's samples as an artifact of this step (the agent uploads
        it while training goes on)."""
        if self.writer is None or self.cfg.run_dir is None:
            return
        path = self.cfg.run_dir / samples_name(step)  # the run folder's samples/
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
        sample = described(path, SAMPLE_KIND, samples_name(step), {})
        write_artifact_records(self.writer, [sample], step)
