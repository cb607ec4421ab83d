"""metrics by job and id

A job's live stream and its metric cursor read `WHERE job_id = ? AND id > ? ORDER BY id`;
without this index that walks every job's metrics from the cursor on.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-29
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# On PostgreSQL the index is built CONCURRENTLY, outside a transaction: `metrics` is the
# largest table, and a plain CREATE INDEX would hold off every metric write while it runs.


def upgrade() -> None:
    with op.get_context().autocommit_block():
        op.create_index(
            "ix_metrics_job_id_id",
            "metrics",
            ["job_id", "id"],
            unique=False,
            postgresql_concurrently=True,
        )


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.drop_index("ix_metrics_job_id_id", table_name="metrics", postgresql_concurrently=True)
