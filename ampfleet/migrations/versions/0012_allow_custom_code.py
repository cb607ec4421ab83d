"""projects.allow_custom_code

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02

Whether a project's keys may upload and run code bundles (null: only the default project).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("projects", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "allow_custom_code",
                sa.Boolean(),
                nullable=True,
                comment="bundles may be uploaded and run; null: only in project 'default'",
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("projects", schema=None) as batch_op:
        batch_op.drop_column("allow_custom_code")
