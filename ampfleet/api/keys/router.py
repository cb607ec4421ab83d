"""HTTP of the keys resource; rules live in service.py, queries in repository.py."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from ampfleet.api.auth import CurrentPrincipal, ListingScope
from ampfleet.api.deps import SessionDep
from ampfleet.api.errors import responses
from ampfleet.api.keys import service
from ampfleet.api.keys.schemas import CreatedKey, KeyIn, KeyList

router = APIRouter(prefix="/v1/keys", tags=["keys"])


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=CreatedKey,
    responses=responses(401, 403, 409, 422),
    summary="Create a key (admin: any project and role; write keys: their own project)",
    description="A project holds at most AMPFLEET_MAX_KEYS_PER_PROJECT active keys (50); "
    "past it the answer is 409 until one is revoked.",
)
def create(body: KeyIn, session: SessionDep, principal: CurrentPrincipal) -> CreatedKey:
    return service.create(session, body, principal)


@router.get("", response_model=KeyList, responses=responses(401), summary="List keys")
def list_keys(
    session: SessionDep,
    scope: ListingScope,
) -> KeyList:
    return service.listing(session, scope)


@router.delete(
    "/{key_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=responses(401, 403, 404),
    summary="Revoke a key; it stops working at once",
)
def revoke(key_id: str, session: SessionDep, principal: CurrentPrincipal) -> Response:
    service.revoke(session, key_id, principal)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
