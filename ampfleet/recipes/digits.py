"""`digits`: an MLP on scikit-learn's bundled 8x8 handwritten digits (no download)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ampfleet.core.recipes import RecipeDefinition

FEATURES, CLASSES = 64, 10


class DigitsHyperparameters(BaseModel):
    model_config = ConfigDict(extra="forbid")

    hidden: int = Field(256, ge=8, le=4096, description="Width of the two hidden layers.")
    dropout: float = Field(0.1, ge=0.0, lt=1.0)
    learning_rate: float = Field(3e-3, gt=0.0, le=1.0)
    weight_decay: float = Field(0.01, ge=0.0, le=1.0)
    batch_size: int = Field(64, ge=1, le=4096, description="Per rank.")
    warmup_steps: int = Field(10, ge=0, le=1_000_000)
    val_fraction: float = Field(0.2, gt=0.0, lt=0.9)
    save_split: bool = Field(
        False,
        description="Write the validation split's sample indices to outputs/val_split.json, "
        "to score the exported model on the very samples the job scored it on.",
    )


def parameter_count(hp: DigitsHyperparameters) -> int:
    """Three linear layers with biases: 64 -> hidden -> hidden -> 10."""
    width = hp.hidden
    return (FEATURES + 1) * width + (width + 1) * width + (width + 1) * CLASSES


def activation_bytes(hp: DigitsHyperparameters) -> int:
    """Inputs, two hidden layers before and after GELU and dropout, logits, in fp32."""
    return 4 * hp.batch_size * (FEATURES + 6 * hp.hidden + 2 * CLASSES)


recipe = RecipeDefinition(
    name="digits",
    description="Classify scikit-learn's 8x8 handwritten digits; reports validation accuracy.",
    hyperparameters=DigitsHyperparameters,
    build_path="ampfleet.workers.training.recipes.digits:build",
    parameter_count=parameter_count,
    activation_bytes=activation_bytes,
    metrics={"val_loss": "min", "val_accuracy": "max"},
)
