"""`charlm` on a rank: a character-level transformer on the standard library's own source.

The text ships with every Python installation, so nothing is downloaded. Bytes are the
characters (vocabulary 256); the last `val_fraction` of the text is held out. Its
hyperparameters and size live in ampfleet/recipes/charlm.py, which the API reads.
"""

from __future__ import annotations

import math
import sysconfig
from functools import lru_cache
from pathlib import Path

import torch
from torch.utils.data import Dataset

from ampfleet.recipes.charlm import VOCAB_SIZE, CharLMHyperparameters
from ampfleet.workers.training.models.gpt import GPT, GPTConfig, lm_eval_step, lm_loss
from ampfleet.workers.training.task import RecipeContext, TrainingTask


@lru_cache
def stdlib_text(max_chars: int) -> bytes:
    """The standard library's top-level modules, in sorted order, up to `max_chars` bytes."""
    root = Path(sysconfig.get_paths()["stdlib"])
    chunks: list[bytes] = []
    total = 0
    for path in sorted(root.glob("*.py")):
        data = path.read_bytes()
        chunks.append(data)
        total += len(data)
        if total >= max_chars:
            break
    return b"".join(chunks)[:max_chars]


class Blocks(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Non-overlapping windows of `block_size + 1` bytes: inputs and next-byte targets."""

    def __init__(self, data: torch.Tensor, block_size: int) -> None:
        self.data = data
        self.block_size = block_size

    def __len__(self) -> int:
        return (len(self.data) - 1) // self.block_size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = index * self.block_size
        chunk = self.data[start : start + self.block_size + 1].long()
        return chunk[:-1], chunk[1:]


def _eval_finalize(sums: dict[str, float]) -> dict[str, float]:
    loss = sums["loss_sum"] / max(sums["count"], 1.0)
    return {"val_loss": loss, "val_bits_per_char": loss / math.log(2)}


def build(hp: CharLMHyperparameters, _ctx: RecipeContext) -> TrainingTask:
    text = torch.frombuffer(bytearray(stdlib_text(hp.max_chars)), dtype=torch.uint8)
    split = int(len(text) * (1 - hp.val_fraction))
    model = GPT(
        GPTConfig(
            vocab_size=VOCAB_SIZE,
            block_size=hp.block_size,
            d_model=hp.d_model,
            n_layers=hp.n_layers,
            n_heads=hp.n_heads,
            dropout=hp.dropout,
        )
    )
    return TrainingTask(
        model=model,
        train_dataset=Blocks(text[:split], hp.block_size),
        val_dataset=Blocks(text[split:], hp.block_size),
        loss=lm_loss,
        eval_step=lm_eval_step,
        eval_finalize=_eval_finalize,
        batch_size=hp.batch_size,
        learning_rate=hp.learning_rate,
        weight_decay=hp.weight_decay,
        warmup_steps=hp.warmup_steps,
        samples_per_item=hp.block_size,
        eval_max_batches=hp.eval_batches,
        blocks=list(model.blocks),
    )
