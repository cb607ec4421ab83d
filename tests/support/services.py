"""The PostgreSQL and Redis servers a test session (or a benchmark) runs against.

By default servers of its own (tests/support/private_services.py): started on first use on
free ports of 127.0.0.1, stopped when the session ends. A machine needs Debian's postgresql
and redis-server packages (`make services-deps`), not running services: a system cluster's
auth, its default ports and whoever else uses them never matter. An operator points the
session at existing servers instead, each on its own:

- AMPFLEET_TEST_POSTGRES_URL: a PostgreSQL role that may create databases, e.g.
  `postgresql://postgres@127.0.0.1:5432/postgres`; each test database is created and
  dropped on that server.
- AMPFLEET_TEST_REDIS_URL: a Redis server, e.g. `redis://127.0.0.1:6379`; the tests choose
  the database index (AMPFLEET_TEST_REDIS_DB, 15 by default, lets two runs share one Redis).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from sqlalchemy.engine import make_url

from tests.support.private_services import PrivatePostgres, missing_packages, private_redis

POSTGRES_VARIABLE = "AMPFLEET_TEST_POSTGRES_URL"
REDIS_VARIABLE = "AMPFLEET_TEST_REDIS_URL"


@dataclass(frozen=True)
class Services:
    postgres: str
    """A libpq URL of a role that may create databases, on its maintenance database."""
    redis: str
    """redis://host:port of the server, without a database index."""

    def database_url(self, name: str) -> str:
        """The SQLAlchemy URL of database `name` on the PostgreSQL server."""
        url = make_url(self.postgres).set(drivername="postgresql+psycopg", database=name)
        return url.render_as_string(hide_password=False)

    def redis_url(self, index: int) -> str:
        return urlunsplit(urlsplit(self.redis)._replace(path=f"/{index}"))


class ServicesUnavailableError(RuntimeError):
    pass


def services_problem() -> str | None:
    """Why the session could not have its servers, or None when it can."""
    needed = []
    if not os.environ.get(POSTGRES_VARIABLE):
        needed.append("postgresql")
    if not os.environ.get(REDIS_VARIABLE):
        needed.append("redis-server")
    missing = [package for package in missing_packages() if package in needed]
    if not missing:
        return None
    return (
        "the tests start PostgreSQL and Redis servers of their own, and Debian's "
        f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed: "
        f"`make services-deps` installs them, or name running servers with "
        f"{POSTGRES_VARIABLE} and {REDIS_VARIABLE}"
    )


class _Session:
    """The servers started, once started, and how to stop them."""

    def __init__(self) -> None:
        self.running = ExitStack()
        self.started: Services | None = None


_session = _Session()


def services() -> Services:
    """The session's servers, started on the first call."""
    if _session.started is None:
        problem = services_problem()
        if problem:
            raise ServicesUnavailableError(problem)
        try:
            _session.started = Services(postgres=_postgres(), redis=_redis())
        except BaseException:
            stop_services()
            raise
    return _session.started


@atexit.register  # a benchmark's run ends without the pytest hook that calls it
def stop_services() -> None:
    _session.running.close()
    _session.started = None


def _postgres() -> str:
    given = os.environ.get(POSTGRES_VARIABLE)
    if given:
        return make_url(given).set(drivername="postgresql").render_as_string(hide_password=False)
    server = PrivatePostgres(durable=False)  # nobody reads its data after the session
    _session.running.callback(shutil.rmtree, server.root, ignore_errors=True)
    server.init()
    server.start()
    _session.running.callback(server.stop)
    return f"postgresql://postgres@{server.host}:{server.port}/postgres"


def _redis() -> str:
    given = os.environ.get(REDIS_VARIABLE)
    if given:
        return urlunsplit(urlsplit(given)._replace(path=""))
    root = Path(tempfile.mkdtemp(prefix="ampfleet-redis-"))
    _session.running.callback(shutil.rmtree, root, ignore_errors=True)
    server = _session.running.enter_context(private_redis(root))
    return f"redis://{server.host}:{server.port}"
