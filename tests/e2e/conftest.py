from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.support.env import fresh_postgres_database
from tests.support.fleet import Fleet


@pytest.fixture(params=["postgres+redis", "embedded"])
def fleet(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Fleet]:
    """A running fleet of real processes on one of the two supported configurations."""
    if request.param == "embedded":
        instance = Fleet(tmp_path, database_url="", broker_url="")
        yield from _run(instance)
        return
    redis_url = "redis://127.0.0.1:6379/14"
    redis.Redis.from_url(redis_url).flushdb()
    with fresh_postgres_database() as database_url:
        instance = Fleet(tmp_path, database_url=database_url, broker_url=redis_url)
        yield from _run(instance)
    redis.Redis.from_url(redis_url).flushdb()


def _run(instance: Fleet) -> Iterator[Fleet]:
    try:
        instance.start()
        yield instance
    finally:
        instance.stop()
