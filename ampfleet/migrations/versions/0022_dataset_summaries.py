"""dataset summaries

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-10

What an upload read of a dataset (a model folder's config, a data file's record shapes), so
a recipe checks it at submit; and the artifact kind of a model's samples at an evaluation.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KINDS = "checkpoint | model | output | profile"


def upgrade() -> None:
    with op.batch_alter_table("datasets") as batch:
        batch.add_column(
            sa.Column(
                "summary",
                sa.JSON(),
                nullable=True,
                comment="what its upload read of it (core/dataset_summary.py); null: nothing",
            )
        )
    with op.batch_alter_table("artifacts") as batch:
        batch.alter_column(
            "kind",
            existing_type=sa.String(16),
            existing_nullable=False,
            comment=f"{KINDS} | sample",
            existing_comment=KINDS,
        )


def downgrade() -> None:
    with op.batch_alter_table("artifacts") as batch:
        batch.alter_column(
            "kind",
            existing_type=sa.String(16),
            existing_nullable=False,
            comment=KINDS,
            existing_comment=f"{KINDS} | sample",
        )
    with op.batch_alter_table("datasets") as batch:
        batch.drop_column("summary")
