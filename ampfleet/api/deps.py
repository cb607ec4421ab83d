"""Dependency aliases shared by every router."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends
from sqlalchemy.orm import Session

from ampfleet.core.db import get_sessionmaker


def get_db_session() -> Iterator[Session]:
    """One unit of work per request: services flush, this commits once (before the response)."""
    session = get_sessionmaker()()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


SessionDep = Annotated[Session, Depends(get_db_session)]
