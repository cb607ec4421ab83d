"""The recipe registry: Python entry points in the group `ampfleet.recipes`.

A recipe is how user models enter the platform. The operator installs recipe packages into
the worker (and API) environment. An entry point names a `RecipeDefinition`: everything the
API needs (name, description, hyperparameter model, the model's size and memory), importable
without torch; `build`, which imports torch and the model code, is only an import path that
ranks resolve when they start. So the API process, which validates and admits jobs, never
loads torch or a recipe's model code. No uploaded code or pickles are ever executed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import import_module
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ampfleet.core.metric_goals import MetricDirection

ENTRY_POINT_GROUP = "ampfleet.recipes"


def _nothing_beyond_the_model(_hyperparameters: Any) -> int:
    return 0


class InputError(ValueError):
    """An input the recipe cannot train on, in words naming the input, the file and what is
    wrong with it: a 422 on `inputs.<name>` at submit, a FAILED job before the ranks meet
    on the node."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"input {name!r}: {message}")
        self.name = name
        self.message = message


@dataclass(frozen=True)
class ListedInput:
    """One of a job's inputs as the API knows it at submit, without reading it."""

    files: Sequence[str] | None
    """The paths of the files an uploaded dataset (or an earlier job's model) holds, as
    stored at upload; None for a shared folder, which only the nodes see."""
    summary: Mapping[str, Any] | None = None
    """What its upload read of it (core/dataset_summary.py: a model folder's config, a data
    file's record shapes); None where nothing was read."""


def _any_inputs_listed(_hyperparameters: Any, _listed: Mapping[str, ListedInput]) -> None:
    return None


def _any_inputs(_hyperparameters: Any, _inputs: Mapping[str, Path]) -> None:
    return None


@dataclass(frozen=True)
class RecipeDefinition:
    name: str
    description: str
    hyperparameters: type[BaseModel]
    build_path: str
    """`module:function`, called on every rank with (hyperparameters, context); returns the
    training task. Only ranks import it: it may import torch."""
    parameter_count: Callable[[Any], int]
    """How many parameters the model has for these (validated) hyperparameters, worked out
    without building it: admission sizes the model states from it."""
    activation_bytes: Callable[[Any], int] = _nothing_beyond_the_model
    """What one rank holds for one micro-batch's backward pass besides the model states
    (saved activations, logits): the activation allowance of admission's estimate."""
    metrics: Mapping[str, MetricDirection] = field(default_factory=dict)
    """The metrics the recipe reports that are objectives, and which way is better: they
    get a "best" in the metrics summary. Names it leaves out follow core/metric_goals.py's
    name rule (`loss`, `val_accuracy`, ...)."""
    check_listed_inputs: Callable[[Any, Mapping[str, ListedInput]], None] = _any_inputs_listed
    """At submit, in the API: the spec's inputs by name, each as its stored file list and
    the summary its upload read (`ListedInput`). Raises `InputError` for what is missing or
    cannot be right; reads nothing else."""
    check_inputs: Callable[[Any, Mapping[str, Path]], None] = _any_inputs
    """On every rank before torch is imported and before the ranks meet: the inputs as the
    node fetched them (what `RecipeContext.inputs` will hold). Raises `InputError`; it may
    read the files, but must not import torch."""

    def build(self, hyperparameters: BaseModel, context: Any) -> Any:
        module_name, _, attribute = self.build_path.partition(":")
        function: Callable[..., Any] = getattr(import_module(module_name), attribute)
        return function(hyperparameters, context)


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
        if ":" not in definition.build_path:
            raise TypeError(f"recipe {entry_point.name}: build_path must be 'module:function'")
        recipes[entry_point.name] = definition
    return recipes


def declared_metrics(name: str) -> Mapping[str, MetricDirection]:
    """What an installed recipe declares about its metrics; nothing for a name that is not
    installed (a bundled recipe: the API never imports it, so its series follow the name
    rule)."""
    recipe = installed_recipes().get(name)
    return recipe.metrics if recipe is not None else {}


def get_recipe(name: str) -> RecipeDefinition:
    recipes = installed_recipes()
    if name not in recipes:
        raise UnknownRecipeError(name, sorted(recipes))
    return recipes[name]
