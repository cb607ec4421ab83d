"""datasets

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01

Users' datasets: named, versioned, content-addressed archives or files in the artifact store.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "datasets",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("project", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False, comment="names the object"),
        sa.Column("size", sa.BigInteger(), nullable=False, comment="bytes as uploaded"),
        sa.Column("format", sa.String(length=8), nullable=False, comment="zip | tar.gz | file"),
        sa.Column(
            "filename", sa.String(length=255), nullable=True, comment="of a single-file dataset"
        ),
        sa.Column("file_count", sa.Integer(), nullable=False),
        sa.Column("unpacked_size", sa.BigInteger(), nullable=False),
        sa.Column("files", sa.JSON(), nullable=False, comment="[{path, size, kind}], as unpacked"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_datasets")),
        sa.UniqueConstraint(
            "project", "name", "version", name="uq_datasets_project_name_version"
        ),
        sa.UniqueConstraint("project", "name", "sha256", name="uq_datasets_project_name_sha256"),
    )
    with op.batch_alter_table("datasets", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_datasets_sha256"), ["sha256"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("datasets", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_datasets_sha256"))

    op.drop_table("datasets")
