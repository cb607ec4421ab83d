"""code bundles

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02

Users' code bundles: checked archives in the artifact store, one row per project and content.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "bundles",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("project", sa.String(length=64), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False, comment="names the object"),
        sa.Column("size", sa.BigInteger(), nullable=False, comment="bytes of the archive"),
        sa.Column("format", sa.String(length=8), nullable=False, comment="zip | tar.gz"),
        sa.Column("file_count", sa.Integer(), nullable=False),
        sa.Column("unpacked_size", sa.BigInteger(), nullable=False),
        sa.Column("files", sa.JSON(), nullable=False, comment="[{path, size, kind}], as unpacked"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_bundles")),
        sa.UniqueConstraint("project", "sha256", name="uq_bundles_project_sha256"),
    )
    with op.batch_alter_table("bundles", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_bundles_sha256"), ["sha256"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("bundles", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_bundles_sha256"))

    op.drop_table("bundles")
