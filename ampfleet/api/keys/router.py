"""API keys of projects: created (the key is shown once), listed, revoked."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Response, status
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select

from ampfleet.api.auth import CurrentPrincipal, ForbiddenError
from ampfleet.api.deps import SessionDep
from ampfleet.api.errors import NotFoundError, responses
from ampfleet.core.keys import create_key
from ampfleet.core.models import ApiKey, utcnow
from ampfleet.core.roles import Role
from ampfleet.core.settings import get_settings
from ampfleet.core.spec import SafeName

router = APIRouter(prefix="/v1/keys", tags=["keys"])


class KeyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    project: SafeName | None = Field(None, description="Defaults to the caller's project.")
    role: Role = Role.WRITE
    name: str = Field("", max_length=128)


class KeyOut(BaseModel):
    id: str
    project: str
    role: Role
    name: str
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


class CreatedKey(KeyOut):
    key: str = Field(description="The key itself. Shown this once; store it now.")


class KeyList(BaseModel):
    items: list[KeyOut]


def _out(row: ApiKey) -> KeyOut:
    return KeyOut.model_validate(row, from_attributes=True)


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=CreatedKey,
    responses=responses(401, 403, 422),
    summary="Create a key (admin: any project and role; write keys: their own project)",
)
def create(body: KeyIn, session: SessionDep, principal: CurrentPrincipal) -> CreatedKey:
    project = body.project or principal.project
    principal.check_can_write(project)
    if body.role is Role.ADMIN and not principal.is_admin:
        raise ForbiddenError("only an admin key can create admin keys")
    row, key = create_key(
        session,
        project=project,
        role=body.role,
        name=body.name,
        pepper=get_settings().secret_key,
    )
    return CreatedKey(**_out(row).model_dump(), key=key)


@router.get("", response_model=KeyList, responses=responses(401), summary="List keys")
def list_keys(
    session: SessionDep,
    principal: CurrentPrincipal,
    project: Annotated[str | None, Query(max_length=64)] = None,
) -> KeyList:
    stmt = select(ApiKey).order_by(ApiKey.id)
    if not principal.is_admin:
        stmt = stmt.where(ApiKey.project == principal.project)
    elif project:
        stmt = stmt.where(ApiKey.project == project)
    return KeyList(items=[_out(row) for row in session.scalars(stmt)])


@router.delete(
    "/{key_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=responses(401, 403, 404),
    summary="Revoke a key; it stops working at once",
)
def revoke(key_id: str, session: SessionDep, principal: CurrentPrincipal) -> Response:
    row = session.get(ApiKey, key_id)
    if row is None:
        raise NotFoundError(f"key {key_id} not found")
    principal.check_visible(row.project, f"key {key_id}")
    principal.check_can_write(row.project)
    if row.role == Role.ADMIN and not principal.is_admin:
        raise ForbiddenError("only an admin key can revoke admin keys")
    if row.revoked_at is None:
        row.revoked_at = utcnow()
    return Response(status_code=status.HTTP_204_NO_CONTENT)
