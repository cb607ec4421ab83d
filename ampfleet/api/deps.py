"""Dependency aliases shared by every router."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from ampfleet.core.db import get_read_sessionmaker, get_sessionmaker


def get_db_session(request: Request) -> Iterator[Session]:
    """One unit of work per request: services flush, this commits once. GET and HEAD only
    read, and get a session that never waits for writers (see core.db)."""
    factory = get_read_sessionmaker if request.method in ("GET", "HEAD") else get_sessionmaker
    session = factory()()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


SessionDep = Annotated[Session, Depends(get_db_session)]
