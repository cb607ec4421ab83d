"""Dependency aliases shared by every router."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from ampfleet.core.db import get_read_sessionmaker, get_sessionmaker, unit_of_work
from ampfleet.core.models import utcnow


def get_db_session(request: Request) -> Iterator[Session]:
    """One unit of work per request: services flush, this commits once, before the response
    goes out, then runs what the handler registered with `core.db.after_commit` (waking
    the scheduler), never after a rollback. GET and HEAD only read, and get a session that
    never waits for writers."""
    factory = get_read_sessionmaker if request.method in ("GET", "HEAD") else get_sessionmaker
    with unit_of_work(factory()) as session:
        yield session


def get_read_session(
    request_session: Annotated[Session, Depends(get_db_session, scope="function")],
) -> Iterator[Session]:
    """A session that only reads, for a write request's look-ups that must not take the
    write lock (on SQLite a write session's first statement takes the database's one).
    Where reads take no lock (PostgreSQL) it is the request's own session: a second one
    would hold a second connection of the same pool while the first is in use."""
    factory = get_read_sessionmaker()
    if factory is get_sessionmaker():
        yield request_session
        return
    with unit_of_work(factory) as session:
        yield session


# scope="function": the commit runs when the endpoint returns, before the response is sent,
# so a client that reads right after a write sees it (by default FastAPI would run it
# after the response).
SessionDep = Annotated[Session, Depends(get_db_session, scope="function")]
ReadSessionDep = Annotated[Session, Depends(get_read_session, scope="function")]


def request_time() -> datetime:
    """When the request is handled: one reading for every rule of it that looks at the clock
    (a token's or a session's end), which a test moves (`app.dependency_overrides`) to see
    one lapse without waiting."""
    return utcnow()


Now = Annotated[datetime, Depends(request_time)]
