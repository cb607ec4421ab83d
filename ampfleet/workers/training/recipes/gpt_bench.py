"""`gpt-bench` on a rank: a GPT of configurable size on generated token sequences.

Each sequence follows t_i = (a * i + b) mod vocab with per-sequence a, b drawn from a
generator seeded by the item index: unlimited, reproducible, and learnable (the loss falls),
with no data to download or hold in memory. Its hyperparameters and size live in
ampfleet/recipes/gpt_bench.py, which the API reads.
"""

from __future__ import annotations

import math

import torch
from torch.utils.data import Dataset

from ampfleet.recipes.gpt_bench import GPTBenchHyperparameters
from ampfleet.workers.training.models.gpt import GPT, GPTConfig, lm_eval_step, lm_loss
from ampfleet.workers.training.task import RecipeContext, TrainingTask


class ArithmeticSequences(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(self, count: int, length: int, vocab: int, offset: int = 0) -> None:
        self.count, self.length, self.vocab, self.offset = count, length, vocab, offset

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(self.offset + index)
        a, b = torch.randint(1, self.vocab, (2,), generator=generator).tolist()
        tokens = (a * torch.arange(self.length + 1) + b) % self.vocab
        return tokens[:-1], tokens[1:]


def _eval_finalize(sums: dict[str, float]) -> dict[str, float]:
    loss = sums["loss_sum"] / max(sums["count"], 1.0)
    return {"val_loss": loss, "val_perplexity": math.exp(min(loss, 50.0))}


def build(hp: GPTBenchHyperparameters, _ctx: RecipeContext) -> TrainingTask:
    model = GPT(
        GPTConfig(
            vocab_size=hp.vocab_size,
            block_size=hp.block_size,
            d_model=hp.d_model,
            n_layers=hp.n_layers,
            n_heads=hp.n_heads,
        )
    )
    return TrainingTask(
        model=model,
        train_dataset=ArithmeticSequences(hp.num_sequences, hp.block_size, hp.vocab_size),
        val_dataset=ArithmeticSequences(
            hp.batch_size * hp.eval_batches * 8, hp.block_size, hp.vocab_size, offset=10**9
        ),
        loss=lm_loss,
        eval_step=lm_eval_step,
        eval_finalize=_eval_finalize,
        batch_size=hp.batch_size,
        learning_rate=hp.learning_rate,
        warmup_steps=hp.warmup_steps,
        samples_per_item=hp.block_size,
        eval_max_batches=hp.eval_batches,
        blocks=list(model.blocks),
    )
