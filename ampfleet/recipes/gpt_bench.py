"""`gpt-bench`: a GPT of configurable size on generated token sequences, for benchmarks.

Sequences are generated on the fly, so `num_sequences` costs no memory for the data itself,
but the distributed sampler holds a permutation of every index (8 bytes each): its bound
keeps that under 80 MB.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ampfleet.core.recipes import RecipeDefinition
from ampfleet.recipes.gpt import gpt_activation_bytes, gpt_parameters

SAMPLER_BYTES_PER_SEQUENCE = 8  # one int64 index in the sampler's permutation


class GPTBenchHyperparameters(BaseModel):
    model_config = ConfigDict(extra="forbid")

    vocab_size: int = Field(8192, ge=16, le=262_144)
    d_model: int = Field(512, ge=16, le=16_384)
    n_layers: int = Field(6, ge=1, le=128)
    n_heads: int = Field(8, ge=1, le=128, description="Must divide d_model.")
    block_size: int = Field(128, ge=8, le=8192)
    batch_size: int = Field(8, ge=1, le=4096, description="Sequences per rank.")
    learning_rate: float = Field(3e-4, gt=0.0, le=1.0)
    warmup_steps: int = Field(10, ge=0, le=1_000_000)
    num_sequences: int = Field(
        100_000, ge=16, le=10_000_000, description="Training sequences per epoch."
    )
    eval_batches: int = Field(4, ge=1, le=1000)

    @model_validator(mode="after")
    def _heads_divide_width(self) -> GPTBenchHyperparameters:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not a multiple of n_heads={self.n_heads}")
        return self


def parameter_count(hp: GPTBenchHyperparameters) -> int:
    return gpt_parameters(
        vocab_size=hp.vocab_size, block_size=hp.block_size, d_model=hp.d_model, n_layers=hp.n_layers
    )


def activation_bytes(hp: GPTBenchHyperparameters) -> int:
    """The micro-batch's activations, plus the sampler's permutation of the sequences."""
    return hp.num_sequences * SAMPLER_BYTES_PER_SEQUENCE + gpt_activation_bytes(
        batch_size=hp.batch_size,
        block_size=hp.block_size,
        vocab_size=hp.vocab_size,
        d_model=hp.d_model,
        n_layers=hp.n_layers,
    )


recipe = RecipeDefinition(
    name="gpt-bench",
    description="GPT of configurable size on generated token sequences, for benchmarks.",
    hyperparameters=GPTBenchHyperparameters,
    build_path="ampfleet.workers.training.recipes.gpt_bench:build",
    parameter_count=parameter_count,
    activation_bytes=activation_bytes,
    metrics={"val_loss": "min", "val_perplexity": "min"},
)
