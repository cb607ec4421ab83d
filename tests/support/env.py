"""Point every cached factory (settings, engine, Celery) at a test configuration."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from kombu.transport import filesystem
from sqlalchemy import text

from ampfleet.api.jobs.node_shapes import recent_node_shapes
from ampfleet.api.key_cache import verified_keys
from ampfleet.core import db, messaging, recipes, settings
from ampfleet.core.migrate import upgrade
from ampfleet.core.models import Base
from tests.support.services import services


def reset_caches() -> None:
    messaging.flush_wake_ups()  # sent under the configuration they were asked for under
    # kombu keeps the file transport's exchanges and bindings for the whole process (a
    # process has one broker folder): a binding declared in an earlier test's folder would
    # make it skip writing the binding into this one's, and messages would route nowhere.
    filesystem.Transport.global_state.clear()
    verified_keys.clear()
    recent_node_shapes.clear()
    for cached in (
        settings.get_settings,
        db.get_engine,
        db.get_sessionmaker,
        db.get_read_sessionmaker,
        messaging.get_celery,
        recipes.installed_recipes,
    ):
        if cached is db.get_engine and db.get_engine.cache_info().currsize:
            db.get_engine().dispose()
        cached.cache_clear()


@contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    reset_caches()
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        reset_caches()


@contextmanager
def fresh_postgres_database(prefix: str = "ampfleet_test", migrate: bool = True) -> Iterator[str]:
    """A new database on the session's PostgreSQL, migrated unless told otherwise; dropped
    afterwards."""
    server = services()
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server.postgres, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = server.database_url(name)
    try:
        if migrate:
            upgrade(url)
        yield url
    finally:
        with psycopg.connect(server.postgres, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# Every table the models declare (the migrations build exactly these), children first: a
# table added later is emptied too, without anyone remembering to list it.
TABLES = tuple(table.name for table in reversed(Base.metadata.sorted_tables))


def empty_tables() -> None:
    """Empties every table of the configured database, between tests, and what this
    process remembers of their rows."""
    verified_keys.clear()
    recent_node_shapes.clear()
    engine = db.get_engine()
    with engine.begin() as conn:
        # DELETE, not TRUNCATE: a test leaves a few rows, and PostgreSQL's TRUNCATE gives each
        # table and index a new file, 8x the time a call (`python -m bench.empty_tables`),
        # twice for each of the suite's ~550 PostgreSQL tests.
        for table in TABLES:
            conn.execute(text(f"DELETE FROM {table}"))
        if engine.dialect.name == "postgresql":  # ids from 1 again, as RESTART IDENTITY did
            conn.execute(text("SELECT setval(oid, 1, false) FROM pg_class WHERE relkind = 'S'"))
