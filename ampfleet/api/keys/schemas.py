"""Pydantic I/O models of the keys resource."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from ampfleet.core.project_names import ProjectName
from ampfleet.core.roles import Role


class KeyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    project: ProjectName | None = Field(None, description="Defaults to the caller's project.")
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
