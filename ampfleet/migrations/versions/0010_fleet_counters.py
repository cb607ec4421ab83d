"""fleet counters

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02

Counters exported to Prometheus (metric points ingested, the scheduling latency histogram)
kept in the database, so they never go down and every API process reports the same value.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "fleet_counters",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("label", sa.String(length=32), nullable=False, comment="a bucket, or ''"),
        sa.Column("shard", sa.String(length=128), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name", "label", "shard", name=op.f("pk_fleet_counters")),
    )


def downgrade() -> None:
    op.drop_table("fleet_counters")
