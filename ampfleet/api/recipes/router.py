"""HTTP of the recipes resource: the installed recipes and their hyperparameter schemas."""

from __future__ import annotations

from fastapi import APIRouter

from ampfleet.api.auth import CurrentPrincipal
from ampfleet.api.errors import responses
from ampfleet.api.recipes import service
from ampfleet.api.recipes.schemas import RecipeList, RecipeOut

router = APIRouter(prefix="/v1/recipes", tags=["recipes"])


@router.get(
    "",
    response_model=RecipeList,
    responses=responses(401),
    operation_id="listRecipes",
    summary="Installed recipes, each with the JSON Schema of its hyperparameters",
)
def list_recipes(_principal: CurrentPrincipal) -> RecipeList:
    return RecipeList(items=service.list_recipes())


@router.get(
    "/{name}",
    response_model=RecipeOut,
    responses=responses(401, 404),
    operation_id="getRecipe",
    summary="One installed recipe: description, hyperparameters, metrics, size",
)
def get_recipe(name: str, _principal: CurrentPrincipal) -> RecipeOut:
    return service.get(name)
