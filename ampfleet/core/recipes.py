"""The recipe registry: Python entry points in the group `ampfleet.recipes`.

A recipe is how user models enter the platform. The operator installs recipe packages into
the worker (and API) environment; the API validates hyperparameters against the recipe's
model; only workers call `build`. No uploaded code or pickles are ever executed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from importlib.metadata import entry_points
from typing import Any

from pydantic import BaseModel

ENTRY_POINT_GROUP = "ampfleet.recipes"


@dataclass(frozen=True)
class RecipeDefinition:
    name: str
    description: str
    hyperparameters: type[BaseModel]
    build: Callable[..., Any]
    """Called on every rank with (hyperparameters, context); returns the training task."""


class UnknownRecipeError(LookupError):
    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__(f"unknown recipe {name!r}; installed recipes: {', '.join(known)}")
        self.name = name
        self.known = known


@lru_cache
def installed_recipes() -> dict[str, RecipeDefinition]:
    recipes: dict[str, RecipeDefinition] = {}
    for entry_point in entry_points(group=ENTRY_POINT_GROUP):
        definition = entry_point.load()
        if not isinstance(definition, RecipeDefinition):
            raise TypeError(f"entry point {entry_point.value} is not a RecipeDefinition")
        recipes[entry_point.name] = definition
    return recipes


def get_recipe(name: str) -> RecipeDefinition:
    recipes = installed_recipes()
    if name not in recipes:
        raise UnknownRecipeError(name, sorted(recipes))
    return recipes[name]
