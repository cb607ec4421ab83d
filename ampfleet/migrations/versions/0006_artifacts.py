"""artifacts

The rows that list what a job produced (checkpoints, the exported model, output files), each
naming a complete object in the artifact store by its sha256.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "artifacts",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("job_id", sa.String(length=40), nullable=False),
        sa.Column("project", sa.String(length=64), nullable=False),
        sa.Column(
            "kind",
            sa.String(length=16),
            nullable=False,
            comment="checkpoint | model | output | profile",
        ),
        sa.Column("name", sa.String(length=255), nullable=False, comment="unique per job"),
        sa.Column("step", sa.Integer(), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False, comment="names the object"),
        sa.Column("content_type", sa.String(length=128), nullable=False),
        sa.Column(
            "details",
            sa.JSON(),
            nullable=False,
            comment="lineage: precision, allreduce dtype, strategy, world size",
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.id"],
            name=op.f("fk_artifacts_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_artifacts")),
        sa.UniqueConstraint("job_id", "name", name="uq_artifacts_job_id_name"),
    )
    with op.batch_alter_table("artifacts", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_artifacts_job_id"), ["job_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_artifacts_sha256"), ["sha256"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("artifacts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_artifacts_sha256"))
        batch_op.drop_index(batch_op.f("ix_artifacts_job_id"))

    op.drop_table("artifacts")
