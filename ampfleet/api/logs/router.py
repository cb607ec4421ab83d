"""HTTP of the logs resource: every rank's stdout and stderr, a page of lines, the tail, or
a live follow (SSE); rules live in service.py, queries in repository.py."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Header, Query
from fastapi.responses import StreamingResponse

from ampfleet.api.auth import CurrentPrincipal
from ampfleet.api.bounds import MAX_ID, MAX_INT
from ampfleet.api.deps import SessionDep
from ampfleet.api.errors import responses
from ampfleet.api.jobs import service as jobs
from ampfleet.api.logs import repository, service
from ampfleet.api.logs.schemas import LogPage
from ampfleet.api.streaming import open_stream, stream_response_doc, wants_stream

router = APIRouter(prefix="/v1/jobs", tags=["logs"])


@router.get(
    "/{job_id}/logs",
    response_model=LogPage,
    responses={
        **responses(401, 404, 422, 429),
        **stream_response_doc(
            "A page of lines; with `Accept: text/event-stream`, the lines as they arrive "
            "(`logs` events, then `end`), resumable with `Last-Event-ID`; an `error` event "
            "ends it if the key is revoked. 429 when the key has as many streams open as it may."
        ),
    },
    summary="Log lines of every rank (filter, tail, follow)",
)
def job_logs(
    job_id: str,
    session: SessionDep,
    principal: CurrentPrincipal,
    rank: Annotated[int | None, Query(ge=0, le=MAX_INT)] = None,
    stream: Annotated[Literal["stdout", "stderr"] | None, Query()] = None,
    tail: Annotated[int | None, Query(ge=1, le=100_000, description="Last N lines.")] = None,
    after: Annotated[int, Query(ge=0, le=MAX_ID, description="Lines with a larger id.")] = 0,
    limit: Annotated[int, Query(ge=1, le=service.BATCH)] = service.BATCH,
    accept: Annotated[str | None, Header()] = None,
    last_event_id: Annotated[str | None, Header(max_length=32)] = None,
) -> LogPage | StreamingResponse:
    job = jobs.get(session, job_id, principal)
    conditions = repository.line_filter(job_id, rank, stream)
    after = service.start_after(
        session, conditions, after=after, tail=tail, last_event_id=last_event_id
    )
    if wants_stream(accept):
        session.close()  # the stream reads with sessions of its own, one per poll
        return open_stream(principal, service.Follower(job_id, conditions, after).step)
    return service.page(session, job, conditions, after, limit)
