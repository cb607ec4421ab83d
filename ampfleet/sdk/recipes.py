"""The installed recipes, as flows (see protocol.py) shared by both clients: what a spec's
`recipe` may name and what its hyperparameters accept, without reading the server's code."""

from __future__ import annotations

from urllib.parse import quote

from pydantic import TypeAdapter

from ampfleet.sdk.flows import Operations
from ampfleet.sdk.models import Recipe
from ampfleet.sdk.protocol import Flow, Request

_recipes = TypeAdapter(list[Recipe])


def list_recipes(ops: Operations) -> Flow[list[Recipe]]:
    response = yield from ops.send(Request("GET", "/v1/recipes"))
    return _recipes.validate_python(response.json()["items"])


def get_recipe(ops: Operations, name: str) -> Flow[Recipe]:
    response = yield from ops.send(Request("GET", f"/v1/recipes/{quote(name, safe='')}"))
    return Recipe.model_validate_json(response.content)
