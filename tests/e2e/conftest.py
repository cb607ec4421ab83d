from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import redis

from tests.support.env import fresh_postgres_database
from tests.support.fleet import Fleet

REDIS_URL = "redis://127.0.0.1:6379/14"
FleetFactory = Callable[..., Fleet]


@pytest.fixture
def make_fleet(tmp_path: Path) -> Iterator[FleetFactory]:
    """Starts fleets of real processes; `backend` is "postgres+redis" or "embedded"."""
    with ExitStack() as stack:

        def start(backend: str = "postgres+redis", **kwargs: object) -> Fleet:
            if backend == "embedded":
                fleet = Fleet(tmp_path, database_url="", broker_url="", **kwargs)  # type: ignore[arg-type]
            else:
                redis.Redis.from_url(REDIS_URL).flushdb()
                stack.callback(lambda: redis.Redis.from_url(REDIS_URL).flushdb())
                database_url = stack.enter_context(fresh_postgres_database())
                fleet = Fleet(tmp_path, database_url=database_url, broker_url=REDIS_URL, **kwargs)  # type: ignore[arg-type]
            stack.callback(fleet.stop)
            return fleet.start()

        yield start


@pytest.fixture(params=["postgres+redis", "embedded"])
def fleet(request: pytest.FixtureRequest, make_fleet: FleetFactory) -> Fleet:
    """A running one-node fleet on each of the two supported configurations."""
    return make_fleet(request.param)
