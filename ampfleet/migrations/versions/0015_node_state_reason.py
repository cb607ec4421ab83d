"""node state reason

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-01

Why a node is cordoned: an operator did it, or the platform did after repeated hangs.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(
            sa.Column(
                "state_reason",
                sa.Text(),
                nullable=True,
                comment="why it is cordoned: by an operator, or automatically",
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("state_reason")
