"""The migrations build exactly the schema the models describe, on both databases, and go
down and up again cleanly."""

from __future__ import annotations

from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, text

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


def _webhook_made_before_the_envelope_is_still_flat(url: str) -> None:
    """0018 on rows that 0017 left: the webhook keeps the flat form its receiver parses, and
    its deliveries get message ids."""
    upgrade(url, "0017")
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO webhooks (id, project, url, secret, states, metric_thresholds,"
                    " active, created_at) VALUES ('wh_old', 'default', 'https://1.1.1.1/h',"
                    " 'sealed', '[\"*\"]', '[]', true, CURRENT_TIMESTAMP)"
                )
            )
            connection.execute(
                text(
                    "INSERT INTO webhook_deliveries (id, webhook_id, job_id, event_key, event,"
                    " payload, status, attempts, next_attempt_at, created_at) VALUES (7,"
                    " 'wh_old', 'job_old', 'state:QUEUED:0', 'job.state', '{}', 'pending', 1,"
                    " CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
                )
            )
        upgrade(url)
        with engine.connect() as connection:
            version = connection.scalar(text("SELECT payload_version FROM webhooks"))
            message_id = connection.scalar(text("SELECT message_id FROM webhook_deliveries"))
    finally:
        engine.dispose()
    assert (version, message_id) == ("flat", "msg_7")


def test_a_webhook_made_before_the_envelope_is_still_flat(tmp_path: Path) -> None:
    _webhook_made_before_the_envelope_is_still_flat(f"sqlite:///{tmp_path / 'old.db'}")


def test_a_webhook_made_before_the_envelope_is_still_flat_on_postgres() -> None:
    with fresh_postgres_database(migrate=False) as url:
        _webhook_made_before_the_envelope_is_still_flat(url)
