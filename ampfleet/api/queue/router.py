"""HTTP of the queue resource; the order lives in service.py, queries in repository.py."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Query

from ampfleet.api.auth import ListingScope
from ampfleet.api.deps import SessionDep
from ampfleet.api.errors import responses
from ampfleet.api.queue import service
from ampfleet.api.queue.schemas import QueuePage

router = APIRouter(prefix="/v1/queue", tags=["queue"])


@router.get(
    "",
    response_model=QueuePage,
    responses=responses(401, 422, 429),
    summary="Queued jobs in the order the scheduler considers them",
    description="Priority class, then weighted fair share (usage over the fair-share window "
    "divided by the project's weight), then submission order; jobs in restart backoff last. "
    "Positions count every project's jobs; a key that is not admin sees its own project's.",
)
def list_queue(
    session: SessionDep,
    scope: ListingScope,
    cursor: Annotated[
        str | None,
        Query(
            max_length=400,
            pattern=r"^[A-Za-z0-9_-]+$",  # base64url without padding
            description="`next_cursor` of the previous page.",
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> QueuePage:
    return service.page(
        session,
        scope,
        cursor=cursor,
        limit=limit,
        now=datetime.now(UTC),
    )
