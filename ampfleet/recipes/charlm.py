"""`charlm`: a character-level transformer on the Python standard library's own source code.

The text ships with every Python installation, so nothing is downloaded. Bytes are the
characters (vocabulary 256); the last `val_fraction` of the text is held out.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ampfleet.core.recipes import RecipeDefinition
from ampfleet.recipes.gpt import gpt_activation_bytes, gpt_parameters

VOCAB_SIZE = 256  # bytes


class CharLMHyperparameters(BaseModel):
    model_config = ConfigDict(extra="forbid")

    d_model: int = Field(128, ge=16, le=2048)
    n_layers: int = Field(4, ge=1, le=48)
    n_heads: int = Field(4, ge=1, le=64, description="Must divide d_model.")
    block_size: int = Field(128, ge=8, le=2048, description="Context length in characters.")
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    batch_size: int = Field(32, ge=1, le=1024, description="Sequences per rank.")
    learning_rate: float = Field(1e-3, gt=0.0, le=1.0)
    weight_decay: float = Field(0.1, ge=0.0, le=1.0)
    warmup_steps: int = Field(20, ge=0, le=1_000_000)
    max_chars: int = Field(
        2_000_000, ge=10_000, le=100_000_000, description="Bytes of text held in memory."
    )
    val_fraction: float = Field(0.1, gt=0.0, lt=0.5)
    eval_batches: int = Field(
        20, ge=1, le=10_000, description="Validation batches per rank per eval."
    )

    @model_validator(mode="after")
    def _heads_divide_width(self) -> CharLMHyperparameters:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not a multiple of n_heads={self.n_heads}")
        return self


def parameter_count(hp: CharLMHyperparameters) -> int:
    return gpt_parameters(
        vocab_size=VOCAB_SIZE, block_size=hp.block_size, d_model=hp.d_model, n_layers=hp.n_layers
    )


def activation_bytes(hp: CharLMHyperparameters) -> int:
    """The micro-batch's activations, plus the text the rank holds (read, copied and
    sliced: three times its size)."""
    return 3 * hp.max_chars + gpt_activation_bytes(
        batch_size=hp.batch_size,
        block_size=hp.block_size,
        vocab_size=VOCAB_SIZE,
        d_model=hp.d_model,
        n_layers=hp.n_layers,
    )


recipe = RecipeDefinition(
    name="charlm",
    description="Character-level transformer on Python standard library source; reports "
    "loss and bits per character.",
    hyperparameters=CharLMHyperparameters,
    build_path="ampfleet.workers.training.recipes.charlm:build",
    parameter_count=parameter_count,
    activation_bytes=activation_bytes,
    metrics={"val_loss": "min", "val_bits_per_char": "min"},
)
