"""records rejected

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-02

How many of a job's rank records the node agent refused (wrong shape, a path outside the
attempt's folders, another job's profile): the events name the first few and why.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(
            sa.Column(
                "records_rejected",
                sa.BigInteger(),
                server_default="0",
                nullable=False,
                comment="rank 0's records the agent refused",
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("records_rejected")
