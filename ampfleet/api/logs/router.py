"""Every rank's stdout and stderr: a page of lines, the tail, or a live follow (SSE)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Header, Query
from fastapi.responses import StreamingResponse
from pydantic import BaseModel
from sqlalchemy import select
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from ampfleet.api.auth import CurrentPrincipal
from ampfleet.api.bounds import MAX_ID, MAX_INT
from ampfleet.api.deps import SessionDep
from ampfleet.api.errors import responses
from ampfleet.api.jobs import service as jobs
from ampfleet.api.streaming import (
    frame,
    open_stream,
    parse_cursor,
    stream_response_doc,
    wants_stream,
)
from ampfleet.core.db import get_read_sessionmaker
from ampfleet.core.models import Job, LogLine
from ampfleet.core.states import JobState

router = APIRouter(prefix="/v1/jobs", tags=["logs"])
BATCH = 1000


class LogLineOut(BaseModel):
    id: int
    attempt: int
    rank: int
    stream: str
    time: datetime
    line: str


class LogPage(BaseModel):
    items: list[LogLineOut]
    next_after: int | None
    dropped_lines: int


def _where(job_id: str, rank: int | None, stream: str | None) -> list[ColumnElement[bool]]:
    conditions: list[ColumnElement[bool]] = [LogLine.job_id == job_id]
    if rank is not None:
        conditions.append(LogLine.rank == rank)
    if stream is not None:
        conditions.append(LogLine.stream == stream)
    return conditions


def _after_tail(session: Session, conditions: list[ColumnElement[bool]], tail: int) -> int:
    """The id just before the last `tail` matching lines."""
    ids = session.scalars(
        select(LogLine.id).where(*conditions).order_by(LogLine.id.desc()).limit(tail)
    ).all()
    return ids[-1] - 1 if ids else 0


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
    limit: Annotated[int, Query(ge=1, le=BATCH)] = BATCH,
    accept: Annotated[str | None, Header()] = None,
    last_event_id: Annotated[str | None, Header(max_length=32)] = None,
) -> LogPage | StreamingResponse:
    job = jobs.get(session, job_id, principal)
    conditions = _where(job_id, rank, stream)
    if tail is not None:
        after = _after_tail(session, conditions, tail)
    if (resumed := parse_cursor(last_event_id, "line id")) is not None:
        (after,) = resumed
    if wants_stream(accept):
        session.close()  # the stream reads with sessions of its own, one per poll
        return open_stream(principal, _Follower(job_id, conditions, after).step)
    lines = session.scalars(
        select(LogLine).where(*conditions, LogLine.id > after).order_by(LogLine.id).limit(limit)
    ).all()
    return LogPage(
        items=[LogLineOut.model_validate(line, from_attributes=True) for line in lines],
        next_after=lines[-1].id if len(lines) == limit else None,
        dropped_lines=job.log_lines_dropped,
    )


class _Follower:
    def __init__(self, job_id: str, conditions: list[ColumnElement[bool]], after: int) -> None:
        self.job_id, self.conditions, self.after = job_id, conditions, after

    def step(self) -> tuple[list[bytes], bool]:
        with get_read_sessionmaker()() as session:
            state = session.scalar(select(Job.state).where(Job.id == self.job_id))
            lines = session.scalars(
                select(LogLine)
                .where(*self.conditions, LogLine.id > self.after)
                .order_by(LogLine.id)
                .limit(BATCH)
            ).all()
        frames = []
        if lines:
            self.after = lines[-1].id
            items = [
                LogLineOut.model_validate(line, from_attributes=True).model_dump(mode="json")
                for line in lines
            ]
            frames.append(frame("logs", {"lines": items}, str(self.after)))
        finished = state is None or (JobState(state).is_terminal() and not lines)
        if finished:
            frames.append(frame("end", {"state": state}, str(self.after)))
        return frames, finished
