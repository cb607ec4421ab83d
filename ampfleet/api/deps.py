"""Dependency aliases shared by every router.

The sessions are async dependencies on purpose. FastAPI runs a sync dependency with `yield`
in the thread pool twice (its start and its end), and every such hop is a hand-off between
the event loop and a thread that holds the request's database connection a little longer.
A session does no I/O until its first statement, so it is made on the event loop; only its
end (the commit, the after-commit actions) goes to a thread."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from ampfleet.core.db import get_read_sessionmaker, get_sessionmaker, unit_of_work


@asynccontextmanager
async def _unit_of_work(factory: sessionmaker[Session]) -> AsyncIterator[Session]:
    """`core.db.unit_of_work` for a dependency: entered on the event loop (making a session
    is no I/O), left in the thread pool (committing or rolling back is)."""
    work = unit_of_work(factory)
    session = work.__enter__()
    try:
        yield session
    except BaseException as exc:
        if not await run_in_threadpool(work.__exit__, type(exc), exc, exc.__traceback__):
            raise
    else:
        await run_in_threadpool(work.__exit__, None, None, None)


async def get_db_session(request: Request) -> AsyncIterator[Session]:
    """One unit of work per request: services flush, this commits once, before the response
    goes out, then runs what the handler registered with `core.db.after_commit` (waking
    the scheduler), never after a rollback. GET and HEAD only read, and get a session that
    never waits for writers."""
    factory = get_read_sessionmaker if request.method in ("GET", "HEAD") else get_sessionmaker
    async with _unit_of_work(factory()) as session:
        yield session


async def get_read_session(
    request_session: Annotated[Session, Depends(get_db_session, scope="function")],
) -> AsyncIterator[Session]:
    """A session that only reads, for a write request's look-ups that must not take the
    write lock (on SQLite a write session's first statement takes the database's one).
    Where reads take no lock (PostgreSQL) it is the request's own session: a second one
    would hold a second connection of the same pool while the first is in use."""
    factory = get_read_sessionmaker()
    if factory is get_sessionmaker():
        yield request_session
        return
    async with _unit_of_work(factory) as session:
        yield session


# scope="function": the commit runs when the endpoint returns, before the response is sent,
# so a client that reads right after a write sees it (by default FastAPI would run it
# after the response).
SessionDep = Annotated[Session, Depends(get_db_session, scope="function")]
ReadSessionDep = Annotated[Session, Depends(get_read_session, scope="function")]
