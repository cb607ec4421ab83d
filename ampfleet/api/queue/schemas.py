"""Pydantic I/O models of the queue resource."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from ampfleet.core.spec import Priority


class QueueEntry(BaseModel):
    position: int = Field(
        description="1-based place in the fleet's queue order, counting every project's jobs."
    )
    id: str
    name: str | None
    project: str
    priority: Priority
    gang_size: int = Field(description="Ranks the job runs (all placed together).")
    pending_reason: str | None = Field(
        description="Why it waits, from the scheduler's last pass; null until a pass saw it."
    )
    estimated_start_at: datetime | None = Field(
        description="From running jobs' progress; null when it cannot be estimated."
    )
    not_before: datetime | None = Field(
        description="Restart backoff: not placed before; such jobs come after the others."
    )
    created_at: datetime


class QueuePage(BaseModel):
    items: list[QueueEntry]
    total: int = Field(description="Queued jobs this key sees, with the filter applied.")
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page.")
