"""standard webhook messages

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-03

Deliveries become Standard Webhooks messages: each has its own `msg_...` id (the webhook-id,
the same on every retry), and a webhook's `payload_version` says whether it receives the
envelope {type, timestamp, data} ("standard") or the event alone ("flat"). Webhooks that
exist already stay flat, so their receivers keep parsing what they did; deliveries that
exist already take `msg_` + their row id.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("webhooks") as batch:
        batch.add_column(
            sa.Column(
                "payload_version",
                sa.String(length=16),
                server_default="flat",
                nullable=False,
                comment="standard: the Standard Webhooks envelope; flat: the event alone",
            )
        )
    with op.batch_alter_table("webhook_deliveries") as batch:
        batch.add_column(
            sa.Column(
                "message_id",
                sa.String(length=40),
                nullable=True,
                comment="webhook-id: msg_..., the same on every retry",
            )
        )
    op.execute("UPDATE webhook_deliveries SET message_id = 'msg_' || id")
    with op.batch_alter_table("webhook_deliveries") as batch:
        batch.alter_column(
            "message_id",
            existing_type=sa.String(length=40),
            existing_comment="webhook-id: msg_..., the same on every retry",
            nullable=False,
        )


def downgrade() -> None:
    with op.batch_alter_table("webhook_deliveries") as batch:
        batch.drop_column("message_id")
    with op.batch_alter_table("webhooks") as batch:
        batch.drop_column("payload_version")
