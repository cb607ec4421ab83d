"""What a recipe hands the training loop, and what the loop tells a recipe about its rank."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.optim import Optimizer
from torch.utils.data import Dataset

Batch = Any


@dataclass(frozen=True)
class RecipeContext:
    rank: int
    world_size: int
    device: torch.device
    seed: int
    output_dir: Path | None = None
    """Where the recipe may write files to keep (plots, tokenizers, samples): after a
    completed run, what is in the first node's folder is listed as `outputs/<path>`
    artifacts. Ranks of one node share it; None outside a job."""
    inputs: Mapping[str, Path] = field(default_factory=dict)
    """The spec's `inputs`, read-only, by name: the folder of an archive dataset or a shared
    folder, the path of a single-file dataset."""
    export_dtype: str = "fp32"
    """The dtype the spec asks the exported model in (`export.dtype`): a recipe's own
    formats (`TrainingTask.export`) write their weights in it."""


@dataclass
class TrainingTask:
    """A model, its data and how to score it; the loop owns precision, DDP and, unless the
    recipe brings its own (`make_optimizer`, `lr_schedule`), the optimizer and schedule."""

    model: nn.Module
    train_dataset: Dataset[Any]
    val_dataset: Dataset[Any] | None
    loss: Callable[[nn.Module, Batch], torch.Tensor]
    """Mean loss of one micro-batch (already on the device)."""
    eval_step: Callable[[nn.Module, Batch], dict[str, torch.Tensor]]
    """Per-batch *sums* (for example loss_sum, correct, count); the loop all-reduces them."""
    eval_finalize: Callable[[dict[str, float]], dict[str, float]]
    """Turns global sums into the reported validation metrics."""
    batch_size: int
    """Per rank, per micro-step."""
    learning_rate: float
    weight_decay: float = 0.0
    warmup_steps: int = 0
    grad_clip: float | None = 1.0
    grad_accum_steps: int = 1
    collate_fn: Callable[[list[Any]], Batch] | None = None
    samples_per_item: int = 1
    """How many samples (for samples/s) one dataset item holds."""
    eval_max_batches: int | None = None
    blocks: Sequence[nn.Module] | None = None
    """The modules FSDP shards one by one (a transformer's layers); None: the model's
    top-level children that hold parameters. Whatever is not in a block (embeddings, a
    tied head) is sharded with the model itself."""
    make_optimizer: Callable[[nn.Module], Optimizer] | None = None
    """The recipe's own optimizer, built over the model as the loop prepared it: under FSDP
    its parameters are this rank's shards, so build it from the `nn.Module` given, never
    from parameters taken earlier. None: AdamW with `learning_rate` and `weight_decay`."""
    lr_schedule: Callable[[int, float], float] | None = None
    """The recipe's own schedule: `lr_schedule(step, progress)` is the factor on each
    parameter group's initial learning rate for step `step` (0-based), `progress` the share
    of the run done (of its steps, or of a runtime-only job's time), 0 to 1. A function of
    the step rather than a stateful scheduler, so a resumed run continues it exactly.
    None: linear warmup over `warmup_steps`, then cosine decay to 10% of `learning_rate`,
    for every parameter group alike."""

    export: Callable[[dict[str, torch.Tensor], Path], dict[str, Any]] | None = None
    """Rank 0, at the end of a completed run, beside model.safetensors: writes the model in
    the recipe's own formats into the folder given (the export folder; every file under its
    `hf/` is listed as a model artifact) from the trained weights (the whole state dict, on
    the CPU, as model.safetensors holds it). Returns the manifest's `lineage` of the model
    (method, base), beside the inputs' sha256 and the precision the platform adds."""

    samples: Callable[[nn.Module], str] | None = None
    """Text the model generates at each evaluation (a language model completing a few
    fixed prompts): called on every rank, in eval mode under the job's autocast and
    no_grad, with the model as the loop holds it (sharded under FSDP, where every forward
    is collective, so every rank must run the same number of them). Rank 0's text is kept
    as the artifact `samples/step-<step>.txt`."""

    def build_optimizer(self, model: nn.Module) -> Optimizer:
        if self.make_optimizer is not None:
            return self.make_optimizer(model)
        return torch.optim.AdamW(
            model.parameters(), lr=self.learning_rate, weight_decay=self.weight_decay
        )
