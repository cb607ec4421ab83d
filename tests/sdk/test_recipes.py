"""`client.recipes()` and `client.recipe(name)`, sync and async, against a live API."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ampfleet import AsyncClient, Client
from ampfleet.sdk import NotFound
from tests.support.sdk_api import recipes_api as api

__all__ = ["api"]  # the fixture: a live API and a read key


def test_recipes_list_with_their_hyperparameter_schemas(api: dict[str, Any]) -> None:
    with Client(api["url"], api["key"]) as client:
        listed = client.recipes()
        digits = client.recipe("digits")
    names = [r.name for r in listed]
    assert "digits" in names
    assert names == sorted(names)
    assert next(r for r in listed if r.name == "digits") == digits
    hidden = digits.hyperparameters["properties"]["hidden"]
    assert (hidden["type"], hidden["default"], hidden["minimum"]) == ("integer", 256, 8)
    assert digits.default_parameters > 0
    assert digits.metrics["val_accuracy"] == "max"


def test_an_unknown_recipe_is_not_found(api: dict[str, Any]) -> None:
    with Client(api["url"], api["key"]) as client, pytest.raises(NotFound, match="nope"):
        client.recipe("nope")


def test_async_client_lists_and_gets_recipes(api: dict[str, Any]) -> None:
    async def read() -> tuple[list[str], str]:
        async with AsyncClient(api["url"], api["key"]) as client:
            listed = await client.recipes()
            one = await client.recipe("digits")
            return [r.name for r in listed], one.name

    names, name = asyncio.run(read())
    assert "digits" in names
    assert name == "digits"
