"""Shared fixtures: real PostgreSQL and Redis (the session's own servers, or those an operator
names: tests/support/services.py), and the embedded default (SQLite + files)."""

from __future__ import annotations

import os
import shutil
import uuid
import zlib
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import redis
from fastapi import FastAPI
from fastapi.testclient import TestClient

from ampfleet.core.db import session_scope
from ampfleet.core.keys import create_key
from ampfleet.core.migrate import upgrade
from ampfleet.core.roles import Role
from ampfleet.core.settings import get_settings
from tests.support.env import empty_tables, environment, fresh_postgres_database
from tests.support.fleet import FLEET_CONFIGURATIONS, Fleet, FleetFactory, running_fleet
from tests.support.seaweedfs import S3Server, running_seaweedfs
from tests.support.services import services, services_problem, stop_services
from tests.support.workers import sandbox_environment, worker_index


def pytest_configure(config: pytest.Config) -> None:
    os.environ.update(sandbox_environment())  # in each worker of a split run: its own uids


def pytest_sessionstart(session: pytest.Session) -> None:
    problem = services_problem()  # the servers themselves start when a test first asks
    if problem:
        pytest.exit(problem, returncode=3)


def pytest_sessionfinish(session: pytest.Session) -> None:
    stop_services()


@pytest.hookimpl(tryfirst=True)  # before `-m "not slow"` deselects what this marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import torch

    for item in items:
        one_fleet_configuration(item)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; runs where one is present")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def one_fleet_configuration(item: pytest.Item) -> None:
    """A test on the `fleet` fixture runs on both configurations in the long tier and on
    one of them in `make test`, half the tests on each (chosen by the test's name, so the
    same every run): a fleet costs 20-60 s, and what differs between the configurations
    (database, broker) has tests of its own on both. `both_configurations` keeps both."""
    configuration = getattr(getattr(item, "callspec", None), "params", {}).get("fleet")
    if configuration is None or "both_configurations" in item.keywords:
        return
    name = getattr(item, "originalname", item.name)
    chosen = FLEET_CONFIGURATIONS[zlib.crc32(f"{item.module.__name__}.{name}".encode()) % 2]
    if configuration != chosen:
        item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    with fresh_postgres_database() as url:
        yield url


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    # Its own database index lets two test runs share one Redis an operator names without
    # flushing each other's keys.
    # A split run's workers share a Redis an operator names: each flushes an index of its own
    # (odd ones: the fleets' index, 14, holds keys under prefixes of their own, never flushed).
    index = int(os.environ.get("AMPFLEET_TEST_REDIS_DB", "15")) - 2 * worker_index()
    url = services().redis_url(index)
    client = redis.Redis.from_url(url)
    client.flushdb()
    yield url
    client.flushdb()


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite database migrated once for the session: each test on SQLite starts from a
    copy (running the migrations took a quarter of a second per test, hundreds of times)."""
    path = tmp_path_factory.mktemp("sqlite-template") / "ampfleet.db"
    upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture(params=["postgres", "sqlite"])
def backend(
    request: pytest.FixtureRequest, tmp_path: Path, postgres_url: str, redis_url: str
) -> Iterator[str]:
    """Configures the process for one backend: PostgreSQL + Redis, or SQLite + files."""
    if request.param == "postgres":
        values = {
            "AMPFLEET_DATABASE_URL": postgres_url,
            "AMPFLEET_BROKER_URL": redis_url,
            "AMPFLEET_DATA_DIR": str(tmp_path / "var"),
        }
    else:
        values = {
            "AMPFLEET_DATABASE_URL": f"sqlite:///{tmp_path / 'var' / 'ampfleet.db'}",
            "AMPFLEET_BROKER_URL": "",
            "AMPFLEET_DATA_DIR": str(tmp_path / "var"),
        }
    values["AMPFLEET_ENVIRONMENT"] = "test"
    values["AMPFLEET_SECRET_KEY"] = "test-secret-not-for-production"
    values["AMPFLEET_NODE_NAME"] = f"test-{uuid.uuid4().hex[:6]}"
    with environment(values):
        if request.param == "sqlite":
            (tmp_path / "var").mkdir(exist_ok=True)
            shutil.copyfile(
                request.getfixturevalue("migrated_sqlite"), tmp_path / "var" / "ampfleet.db"
            )
        empty_tables()
        yield request.param
        empty_tables()


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """One SeaweedFS S3 server for the session, with a bucket; started when a test asks."""
    with running_seaweedfs(tmp_path_factory.mktemp("seaweedfs")) as server:
        server.create_bucket(S3_TEST_BUCKET)
        yield server


S3_TEST_BUCKET = "ampfleet-test"


@pytest.fixture(params=["local", "s3"])
def store_environment(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """AMPFLEET_* values for an empty artifact store: files under tmp_path, or a fresh prefix
    of the session's SeaweedFS bucket."""
    if request.param == "local":
        return {"AMPFLEET_ARTIFACT_URL": f"file://{tmp_path / 'artifacts'}"}
    server: S3Server = request.getfixturevalue("seaweedfs")
    return server.environment(S3_TEST_BUCKET, prefix=f"t{uuid.uuid4().hex[:12]}")


KeyFactory = Callable[..., str]


@pytest.fixture
def make_key(backend: str) -> KeyFactory:
    """Creates an API key in the database: make_key(project="a", role="write")."""

    def make(project: str = "default", role: str = "admin") -> str:
        with session_scope() as session:
            _, key = create_key(
                session,
                project=project,
                role=Role(role),
                name="test",
                pepper=get_settings().secret_key,
            )
        return key

    return make


@pytest.fixture
def app(backend: str) -> FastAPI:
    from ampfleet.api.app import create_app

    return create_app()


@pytest.fixture
def anonymous(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture
def client(app: FastAPI, make_key: KeyFactory) -> Iterator[TestClient]:
    """An admin of project `default`."""
    headers = {"Authorization": f"Bearer {make_key()}"}
    with TestClient(app, raise_server_exceptions=False, headers=headers) as test_client:
        yield test_client


@pytest.fixture
def make_fleet(tmp_path: Path) -> Iterator[FleetFactory]:
    """Starts fleets of real processes; `backend` is "postgres+redis" or "embedded"."""
    with ExitStack() as stack:
        counter = iter(range(100))

        def start(backend: str = "postgres+redis", **kwargs: object) -> Fleet:
            root = tmp_path / f"fleet{next(counter)}"
            return stack.enter_context(running_fleet(root, backend, **kwargs))

        yield start
