"""Every test starts on empty tables: the `backend` fixture empties every table the
migrations build, on both databases, so no row one test writes is seen by the next."""

from __future__ import annotations

from sqlalchemy import func, inspect, select, table

from ampfleet.core.db import get_engine, session_scope
from ampfleet.core.models import Webhook, WebhookDelivery
from tests.support.env import TABLES, empty_tables


def test_the_emptied_tables_are_every_table_the_migrations_build(backend: str) -> None:
    built = set(inspect(get_engine()).get_table_names()) - {"alembic_version"}
    assert built == set(TABLES)


def test_webhooks_and_their_deliveries_are_emptied(backend: str) -> None:
    with session_scope() as session:
        session.add(
            Webhook(
                id="wh_left_behind",
                project="default",
                url="https://example.com/hook",
                secret="not-a-real-secret",
                states=["*"],
            )
        )
        session.flush()
        session.add(
            WebhookDelivery(
                webhook_id="wh_left_behind",
                message_id="msg_left_behind",
                job_id="job_left_behind",
                event_key="state:QUEUED",
                event="job.state",
                payload={},
            )
        )
    empty_tables()
    with session_scope() as session:
        counts = {
            name: session.scalar(select(func.count()).select_from(table(name))) for name in TABLES
        }
    assert set(counts.values()) == {0}, counts
