"""The migrations build exactly the schema the models describe, on both databases, and go
down and up again cleanly."""

from __future__ import annotations

from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine

from ampfleet.core.migrate import alembic_config, upgrade
from ampfleet.core.models import Base
from tests.support.env import fresh_postgres_database


def _diff(url: str) -> list:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            return compare_metadata(context, Base.metadata)
    finally:
        engine.dispose()


def test_migrations_match_the_models_on_postgres() -> None:
    with fresh_postgres_database() as url:
        assert _diff(url) == []


def test_migrations_match_the_models_on_sqlite(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'schema.db'}"
    upgrade(url)
    assert _diff(url) == []


def _down_and_up_again(url: str) -> None:
    from alembic import command

    command.downgrade(alembic_config(url), "base")
    upgrade(url)
    assert _diff(url) == []


def test_downgrade_to_base_and_up_again(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'roundtrip.db'}"
    upgrade(url)
    _down_and_up_again(url)


def test_downgrade_to_base_and_up_again_on_postgres() -> None:
    """Also runs the steps that work outside a transaction there (CREATE INDEX
    CONCURRENTLY)."""
    with fresh_postgres_database() as url:
        _down_and_up_again(url)
