"""Dependency aliases shared by every router.

The sessions are async dependencies on purpose. FastAPI runs a sync dependency with `yield`
in the thread pool twice (its start and its end), and every hop between the event loop and
a thread costs more than it carries under load: the woken thread and the loop then queue
for the interpreter (BENCHMARKS.md, "API"). A session does no I/O until its first
statement, so it is made on the event loop; its end (the commit, the after-commit actions)
goes to a thread only when there is something to end: the busiest routes end their unit of
work in their own thread (`ends_unit_of_work`), and their sessions are then closed on the
loop."""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Annotated, ParamSpec, TypeVar

from fastapi import Depends, Request
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from ampfleet.core.db import (
    commit_unit_of_work,
    get_read_sessionmaker,
    get_sessionmaker,
    nothing_to_commit,
    unit_of_work,
)
from ampfleet.core.models import utcnow

P = ParamSpec("P")
R = TypeVar("R")


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
        if nothing_to_commit(session):
            work.__exit__(None, None, None)  # a commit of nothing and a close: no I/O
        else:
            await run_in_threadpool(work.__exit__, None, None, None)


def ends_unit_of_work(handler: Callable[P, R]) -> Callable[P, R]:
    """A sync route handler that commits its request's unit of work (`session`) itself, as
    its last step, in the thread it already runs in: what the session dependency would
    otherwise do in one more thread after it. A handler that raises commits nothing (the
    dependency rolls back). For the busiest routes; the rule stays the dependency's."""
    if "session" not in inspect.signature(handler).parameters:
        raise TypeError(f"{handler.__qualname__} has no `session` to end the unit of work of")

    @functools.wraps(handler)
    def handle(*args: P.args, **kwargs: P.kwargs) -> R:
        result = handler(*args, **kwargs)
        commit_unit_of_work(kwargs["session"])  # type: ignore[arg-type]
        return result

    return handle


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


async def request_time() -> datetime:
    """When the request is handled: one reading for every rule of it that looks at the clock
    (a token's or a session's end), which a test moves (`app.dependency_overrides`) to see
    one lapse without waiting. Async: a sync dependency would cost a thread hand-off."""
    return utcnow()


Now = Annotated[datetime, Depends(request_time)]
