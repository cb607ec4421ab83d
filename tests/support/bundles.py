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

HOSTILE = b"""
import json
import os
import socket
from pathlib import Path

from ampfleet.core.recipes import RecipeDefinition
from ampfleet.recipes.digits import DigitsHyperparameters, parameter_count


class Hyperparameters(DigitsHyperparameters):
    targets: list[list]
    secrets: list[str]


def connect(host, port):
    try:
        with socket.create_connection((host, port), timeout=2):
            return "connected"
    except OSError as exc:
        return f"refused: {type(exc).__name__}"


def build(hp, ctx):
    from ampfleet.workers.training.recipes.digits import build as digits

    if ctx.rank == 0:
        run = ctx.output_dir.parent
        os.mkfifo(run / "trap.fifo")
        forged = [*hp.secrets, str(run / "trap.fifo")]
        with (run / "events.jsonl").open("a") as events:
            for n, path in enumerate(forged):
                record = {"kind": "artifact", "artifact_kind": "output",
                          "name": f"outputs/forged{n}", "paths": [path], "step": None}
                events.write(json.dumps(record) + "\\n")
            events.write(json.dumps({"kind": "artifact", "artifact_kind": "checkpoint",
                                     "name": "checkpoint-000000001", "paths": hp.secrets,
                                     "step": 1}) + "\\n")
            events.write('{"kind": "metrics", "step": "notanint", "values": {"loss": 1}}\\n')
            events.write('{"kind": "progress", "step": {"x": 1}, "total_steps": 3}\\n')
        report = {f"{h}:{p}": connect(h, p) for h, p in hp.targets}
        (ctx.output_dir / "report.json").write_text(json.dumps(report))
    fields = hp.model_dump(exclude={"targets", "secrets"})
    return digits(DigitsHyperparameters(**fields), ctx)


recipe = RecipeDefinition(
    name="hostile",
    description="forges, probes, then trains digits",
    hyperparameters=Hyperparameters,
    build_path="hostile_pkg.recipe:build",
    parameter_count=parameter_count,
)
"""
"""A hostile tenant's recipe, as the package `hostile_pkg.recipe`: rank 0 forges artifact
records (every path of `secrets`, and a FIFO), writes malformed records, and writes whether it
could connect to each of `targets` into the outputs (report.json); then it trains digits."""
