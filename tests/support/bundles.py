"""Source files of the user bundles that tests upload."""

from __future__ import annotations

GREETING_RECIPE = b"""
from ampfleet.core.recipes import RecipeDefinition
from ampfleet.recipes.digits import DigitsHyperparameters, parameter_count


class Hyperparameters(DigitsHyperparameters):
    greeting: str = "hello from the bundle"


def build(hp, ctx):
    from ampfleet.workers.training.recipes.digits import build as digits

    if ctx.rank == 0:
        (ctx.output_dir / "greeting.txt").write_text(hp.greeting)
    return digits(DigitsHyperparameters(**hp.model_dump(exclude={"greeting"})), ctx)


recipe = RecipeDefinition(
    name="my-digits",
    description="digits, from a bundle",
    hyperparameters=Hyperparameters,
    build_path="my_pkg.recipe:build",
    parameter_count=parameter_count,
    metrics={"val_accuracy": "max"},
)
"""
"""The digits recipe with a hyperparameter of its own, as a user's package `my_pkg.recipe`:
rank 0 writes the greeting into the outputs, so a test sees the bundle's code ran."""
