"""webhook secret rotation

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02

A webhook keeps its previous secret (sealed like the current one) until the rotation's
overlap ends, so deliveries carry both signatures meanwhile.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("webhooks", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "previous_secret",
                sa.String(length=128),
                nullable=True,
                comment="the secret before the last rotation, also signing until its end",
            )
        )
        batch_op.add_column(
            sa.Column("previous_secret_until", sa.DateTime(timezone=True), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table("webhooks", schema=None) as batch_op:
        batch_op.drop_column("previous_secret_until")
        batch_op.drop_column("previous_secret")
