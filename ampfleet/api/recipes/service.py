"""Rules of the recipes resource: describe the installed recipes from their torch-free
definitions (core/recipes.py); nothing here builds a model."""

from __future__ import annotations

from ampfleet.api.errors import NotFoundError
from ampfleet.api.recipes.schemas import RecipeOut
from ampfleet.core.memory import MB, rank_memory
from ampfleet.core.recipes import RecipeDefinition, installed_recipes


def describe(recipe: RecipeDefinition) -> RecipeOut:
    defaults = rank_memory(recipe, recipe.hyperparameters())
    return RecipeOut(
        name=recipe.name,
        description=recipe.description,
        hyperparameters=recipe.hyperparameters.model_json_schema(),
        metrics=dict(recipe.metrics),
        default_parameters=defaults.parameters,
        default_rank_memory_mb=-(-defaults.total_bytes // MB),
    )


def list_recipes() -> list[RecipeOut]:
    return [describe(recipe) for _, recipe in sorted(installed_recipes().items())]


def get(name: str) -> RecipeOut:
    recipe = installed_recipes().get(name)
    if recipe is None:
        raise NotFoundError(f"recipe {name} is not installed")
    return describe(recipe)
