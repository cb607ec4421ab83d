from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from ampfleet.core.metric_goals import MetricDirection


class RecipeOut(BaseModel):
    name: str = Field(description="What a job spec's `recipe` names.")
    description: str
    hyperparameters: dict[str, Any] = Field(
        description="JSON Schema of the recipe's hyperparameters: types, defaults and bounds."
    )
    metrics: dict[str, MetricDirection] = Field(
        description="The validation metrics it reports, and which way is better."
    )
    default_parameters: int = Field(description="Model parameters under the defaults.")
    default_rank_memory_mb: int = Field(
        description="What admission estimates one rank needs under the defaults: model "
        "states (16 bytes per parameter), activations and the runtime."
    )


class RecipeList(BaseModel):
    items: list[RecipeOut]
