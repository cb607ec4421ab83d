"""`digits`: an MLP on scikit-learn's bundled 8x8 handwritten digits (no download)."""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn
from torch.nn import functional as F  # noqa: N812
from torch.utils.data import TensorDataset

from ampfleet.core.recipes import RecipeDefinition
from ampfleet.workers.training.task import Batch, RecipeContext, TrainingTask

SPLIT_SEED = 1234  # fixed, so every job and every rank sees the same validation set


class DigitsHyperparameters(BaseModel):
    model_config = ConfigDict(extra="forbid")

    hidden: int = Field(256, ge=8, le=4096, description="Width of the two hidden layers.")
    dropout: float = Field(0.1, ge=0.0, lt=1.0)
    learning_rate: float = Field(3e-3, gt=0.0, le=1.0)
    weight_decay: float = Field(0.01, ge=0.0, le=1.0)
    batch_size: int = Field(64, ge=1, le=4096, description="Per rank.")
    warmup_steps: int = Field(10, ge=0)
    val_fraction: float = Field(0.2, gt=0.0, lt=0.9)


def _datasets(val_fraction: float) -> tuple[TensorDataset, TensorDataset]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    features = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    labels = torch.tensor(digits.target, dtype=torch.long)
    train_idx, val_idx = train_test_split(
        range(len(labels)), test_size=val_fraction, random_state=SPLIT_SEED, stratify=labels
    )
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


def build(hp: DigitsHyperparameters, _ctx: RecipeContext) -> TrainingTask:
    train, val = _datasets(hp.val_fraction)
    model = nn.Sequential(
        nn.Linear(64, hp.hidden),
        nn.GELU(),
        nn.Dropout(hp.dropout),
        nn.Linear(hp.hidden, hp.hidden),
        nn.GELU(),
        nn.Dropout(hp.dropout),
        nn.Linear(hp.hidden, 10),
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


recipe = RecipeDefinition(
    name="digits",
    description="Classify scikit-learn's 8x8 handwritten digits; reports validation accuracy.",
    hyperparameters=DigitsHyperparameters,
    build=build,
)
