"""`digits` on a rank: the MLP and scikit-learn's bundled 8x8 digits (no download).

scikit-learn is imported with the module (a second or so), not when the data is first
read, so that a warm launcher (workers/local_launcher.py) has it imported for the ranks.

Its hyperparameters and size live in ampfleet/recipes/digits.py, which the API reads.
"""

from __future__ import annotations

import json

import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.nn import functional as F  # noqa: N812
from torch.utils.data import TensorDataset

from ampfleet.recipes.digits import CLASSES, FEATURES, DigitsHyperparameters
from ampfleet.workers.training.task import Batch, RecipeContext, TrainingTask

SPLIT_SEED = 1234  # fixed, so every job and every rank sees the same validation set
VAL_SPLIT_FILE = "val_split.json"  # with `save_split`, in the output folder


def split_indices(val_fraction: float) -> tuple[list[int], list[int]]:
    """Indices into `load_digits()` of the training and the validation samples, in order."""
    labels = load_digits().target
    train_idx, val_idx = train_test_split(
        range(len(labels)), test_size=val_fraction, random_state=SPLIT_SEED, stratify=labels
    )
    return list(train_idx), list(val_idx)


def _datasets(val_fraction: float) -> tuple[TensorDataset, TensorDataset]:
    digits = load_digits()
    features = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    labels = torch.tensor(digits.target, dtype=torch.long)
    train_idx, val_idx = split_indices(val_fraction)
    return (
        TensorDataset(features[train_idx], labels[train_idx]),
        TensorDataset(features[val_idx], labels[val_idx]),
    )


def _loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    features, labels = batch
    return F.cross_entropy(model(features), labels)


def _eval_step(model: nn.Module, batch: Batch) -> dict[str, torch.Tensor]:
    features, labels = batch
    logits = model(features).float()
    return {
        "loss_sum": F.cross_entropy(logits, labels, reduction="sum"),
        "correct": (logits.argmax(dim=-1) == labels).sum().float(),
        "count": torch.tensor(float(labels.numel())),
    }


def _eval_finalize(sums: dict[str, float]) -> dict[str, float]:
    count = max(sums["count"], 1.0)
    return {"val_loss": sums["loss_sum"] / count, "val_accuracy": sums["correct"] / count}


def build(hp: DigitsHyperparameters, ctx: RecipeContext) -> TrainingTask:
    train, val = _datasets(hp.val_fraction)
    if hp.save_split and ctx.rank == 0 and ctx.output_dir is not None:
        split = {
            "source": "sklearn.datasets.load_digits",
            "validation": split_indices(hp.val_fraction)[1],
        }
        (ctx.output_dir / VAL_SPLIT_FILE).write_text(json.dumps(split))
    model = nn.Sequential(
        nn.Linear(FEATURES, hp.hidden),
        nn.GELU(),
        nn.Dropout(hp.dropout),
        nn.Linear(hp.hidden, hp.hidden),
        nn.GELU(),
        nn.Dropout(hp.dropout),
        nn.Linear(hp.hidden, CLASSES),
    )
    return TrainingTask(
        model=model,
        train_dataset=train,
        val_dataset=val,
        loss=_loss,
        eval_step=_eval_step,
        eval_finalize=_eval_finalize,
        batch_size=hp.batch_size,
        learning_rate=hp.learning_rate,
        weight_decay=hp.weight_decay,
        warmup_steps=hp.warmup_steps,
    )
