"""`ampfleet recipes` and `ampfleet recipes NAME`: what a spec's `recipe` may name and what
its hyperparameters accept, read from the JSON Schema the API answers (the CLI never imports
a recipe's code, so it shows what the server has installed, not what this machine has)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.markup import escape

from ampfleet.cli.common import Key, Url, api_client, print_table, stdout_console
from ampfleet.sdk.models import Recipe

PANEL = "Use the API"


def _size(parameters: int) -> str:
    for unit, scale in (("B", 10**9), ("M", 10**6), ("k", 10**3)):
        if parameters >= scale:
            return f"{parameters / scale:.1f}{unit}"
    return str(parameters)


def _type(schema: dict[str, Any]) -> str:
    if "enum" in schema:
        return " | ".join(json.dumps(value) for value in schema["enum"])
    if "anyOf" in schema:
        return " | ".join(_type(option) for option in schema["anyOf"])
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    if schema.get("type") == "array":
        return f"array of {_type(schema.get('items', {}))}"
    return str(schema.get("type", "any"))


def _bounds(schema: dict[str, Any]) -> str:
    """An interval: `[16, 2048]`, `(0, 1]`, `>= 0`; empty when the schema sets none."""
    low = ("[", schema["minimum"]) if "minimum" in schema else ("(", schema.get("exclusiveMinimum"))
    high = (
        ("]", schema["maximum"]) if "maximum" in schema else (")", schema.get("exclusiveMaximum"))
    )
    if low[1] is not None and high[1] is not None:
        return f"{low[0]}{low[1]}, {high[1]}{high[0]}"
    if low[1] is not None:
        return f"{'>=' if low[0] == '[' else '>'} {low[1]}"
    if high[1] is not None:
        return f"{'<=' if high[0] == ']' else '<'} {high[1]}"
    return ""


def _print_list(listed: list[Recipe]) -> None:
    rows = [
        (
            escape(r.name),
            escape(r.description),
            _size(r.default_parameters),
            f"{r.default_rank_memory_mb:,}",
        )
        for r in listed
    ]
    print_table(("NAME", "DESCRIPTION", "PARAMETERS", "RANK MB"), rows, "no recipes installed")


def _print_hyperparameters(recipe: Recipe) -> None:
    stdout_console().print(f"[bold]{escape(recipe.name)}[/bold]: {escape(recipe.description)}")
    properties: dict[str, dict[str, Any]] = recipe.hyperparameters.get("properties", {})
    rows = [
        (
            escape(field),
            escape(_type(schema)),
            escape(json.dumps(schema["default"])) if "default" in schema else "(required)",
            escape(_bounds(schema)),
            escape(schema.get("description", "")),
        )
        for field, schema in properties.items()
    ]
    print_table(
        ("HYPERPARAMETER", "TYPE", "DEFAULT", "BOUNDS", "DESCRIPTION"), rows, "no hyperparameters"
    )


def recipes(
    name: Annotated[
        str | None,
        typer.Argument(help="A recipe's name: show its hyperparameters.", show_default=False),
    ] = None,
    url: Url = None,
    key: Key = None,
) -> None:
    """The installed recipes (name, description, default size), or one recipe's
    hyperparameters (name, type, default, bounds, description)."""
    with api_client(url, key) as client:
        if name is None:
            _print_list(client.recipes())
        else:
            _print_hyperparameters(client.recipe(name))


def register(app: typer.Typer) -> None:
    app.command("recipes", rich_help_panel=PANEL)(recipes)
