"""Engine and session factories. A unit of work commits once, in `session_scope`."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

import sqlalchemy
from sqlalchemy import Engine, event
from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session, sessionmaker

from ampfleet.core.settings import get_settings

log = logging.getLogger(__name__)


def make_engine(url: str, *, read_only: bool = False) -> Engine:
    # `sqlalchemy.create_engine` looked up when called: the statement tracing
    # (core/tracing.py) wraps it at process start, after this module may have been imported.
    if url.startswith("sqlite"):
        engine = sqlalchemy.create_engine(
            url,
            connect_args={"timeout": 30, "check_same_thread": False},
            hide_parameters=True,  # see below
            **_pool_arguments(),
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        if read_only:
            # A write through a read session is a bug; make it fail loudly, at once.
            event.listen(engine, "connect", _sqlite_query_only)
        # pysqlite's own transaction handling defers BEGIN and breaks SELECT-then-UPDATE
        # fencing; emit BEGIN IMMEDIATE ourselves so writers serialise at the start. Readers
        # take a plain (deferred) BEGIN: in WAL mode they then never wait for a writer.
        begin = "BEGIN" if read_only else "BEGIN IMMEDIATE"
        event.listen(engine, "begin", lambda conn: conn.exec_driver_sql(begin))
        return engine
    # SQL parameters may hold secrets (sealed ones too): errors and logs show the statement only.
    return sqlalchemy.create_engine(
        url, pool_pre_ping=True, hide_parameters=True, **_pool_arguments()
    )


def _pool_arguments() -> dict[str, Any]:
    """A short wait for a free connection: a request that cannot get one soon is answered
    503 with Retry-After (api/errors.py) instead of queueing for long behind the others."""
    settings = get_settings()
    return {
        "pool_size": settings.db_pool_size,
        "max_overflow": settings.db_pool_max_overflow,
        "pool_timeout": settings.db_pool_timeout_s,
    }


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.isolation_level = None  # we issue BEGIN ourselves (see make_engine)
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def _sqlite_query_only(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.execute("PRAGMA query_only=ON")


@lru_cache
def get_engine() -> Engine:
    return make_engine(get_settings().effective_database_url)


@lru_cache
def get_sessionmaker() -> sessionmaker[Session]:
    return sessionmaker(get_engine(), expire_on_commit=False)


@lru_cache
def get_read_sessionmaker() -> sessionmaker[Session]:
    """Sessions for requests that only read. On SQLite they use their own engine, whose
    transactions do not take the write lock; elsewhere they are ordinary sessions."""
    url = get_settings().effective_database_url
    if not url.startswith("sqlite"):
        return get_sessionmaker()
    return sessionmaker(make_engine(url, read_only=True), expire_on_commit=False)


def database_unavailable(error: BaseException) -> bool:
    """A database error that a later try may not meet: the server or the connection (a
    SQLite file locked by another writer counts), not the statement or its data."""
    if isinstance(error, sa_exc.OperationalError | sa_exc.TimeoutError | sa_exc.DisconnectionError):
        return True
    return isinstance(error, sa_exc.DBAPIError) and error.connection_invalidated


def is_postgres(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"


_AFTER_COMMIT = "ampfleet.after_commit"


def after_commit(session: Session, action: Callable[[], None]) -> None:
    """Run `action` once `session`'s unit of work has committed, and never if it rolls
    back: for what must find the committed rows (waking the scheduler for a new job)."""
    session.info.setdefault(_AFTER_COMMIT, []).append(action)


@contextmanager
def unit_of_work(factory: sessionmaker[Session]) -> Iterator[Session]:
    """One unit of work: commits once at the end, rolls back on any error; then the
    actions registered with `after_commit`, only after a commit."""
    session = factory()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        actions = session.info.pop(_AFTER_COMMIT, [])
        session.close()
    _run_after_commit(actions)


def commit_unit_of_work(session: Session) -> None:
    """End `session`'s unit of work now, in the caller's thread, as `unit_of_work` ends it:
    commit, then the actions registered with `after_commit`. What encloses it then finds
    nothing left to do but close."""
    session.commit()
    _run_after_commit(session.info.pop(_AFTER_COMMIT, []))


def nothing_to_commit(session: Session) -> bool:
    """Whether ending `session`'s unit of work would do no I/O: no transaction begun,
    nothing waiting to be flushed, no action waiting for a commit."""
    return not (
        session.in_transaction()
        or session.new
        or session.dirty
        or session.deleted
        or session.info.get(_AFTER_COMMIT)
    )


def _run_after_commit(actions: list[Callable[[], None]]) -> None:
    for action in actions:
        try:
            action()
        except Exception:  # the commit stands; an action is a follow-up, not part of it
            log.exception("an action after commit failed")


@contextmanager
def session_scope() -> Iterator[Session]:
    with unit_of_work(get_sessionmaker()) as session:
        yield session
