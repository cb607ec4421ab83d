"""scheduling policy, api keys, logs, volume accounting

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("prefix", sa.String(length=16), nullable=False, comment="public lookup part"),
        sa.Column("secret_hash", sa.String(length=64), nullable=False),
        sa.Column("project", sa.String(length=64), nullable=False),
        sa.Column("role", sa.String(length=8), nullable=False, comment="admin | write | read"),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("prefix", name=op.f("uq_api_keys_prefix")),
    )
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_api_keys_project"), ["project"], unique=False)

    op.create_table(
        "projects",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("weight", sa.Float(), nullable=False, comment="fair-share weight"),
        sa.Column("max_slots", sa.Integer(), nullable=True, comment="concurrent GPUs/slots"),
        sa.Column("max_queued_jobs", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_projects")),
    )
    op.create_table(
        "log_lines",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("job_id", sa.String(length=40), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("stream", sa.String(length=6), nullable=False, comment="stdout | stderr"),
        sa.Column("time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("line", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_log_lines_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_log_lines")),
    )
    with op.batch_alter_table("log_lines", schema=None) as batch_op:
        batch_op.create_index("ix_log_lines_job_id_id", ["job_id", "id"], unique=False)
        batch_op.create_index("ix_log_lines_job_id_rank_id", ["job_id", "rank", "id"], unique=False)

    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("pending_reason", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("queue_position", sa.Integer(), nullable=True))
        batch_op.add_column(
            sa.Column("estimated_start_at", sa.DateTime(timezone=True), nullable=True)
        )
        batch_op.add_column(
            sa.Column(
                "not_before", sa.DateTime(timezone=True), nullable=True, comment="restart backoff"
            )
        )
        batch_op.add_column(
            sa.Column("metric_points", sa.BigInteger(), server_default="0", nullable=False)
        )
        batch_op.add_column(
            sa.Column("metric_points_dropped", sa.BigInteger(), server_default="0", nullable=False)
        )
        batch_op.add_column(
            sa.Column("log_bytes", sa.BigInteger(), server_default="0", nullable=False)
        )
        batch_op.add_column(
            sa.Column("log_lines_dropped", sa.BigInteger(), server_default="0", nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("log_lines_dropped")
        batch_op.drop_column("log_bytes")
        batch_op.drop_column("metric_points_dropped")
        batch_op.drop_column("metric_points")
        batch_op.drop_column("not_before")
        batch_op.drop_column("estimated_start_at")
        batch_op.drop_column("queue_position")
        batch_op.drop_column("pending_reason")

    with op.batch_alter_table("log_lines", schema=None) as batch_op:
        batch_op.drop_index("ix_log_lines_job_id_rank_id")
        batch_op.drop_index("ix_log_lines_job_id_id")

    op.drop_table("log_lines")
    op.drop_table("projects")
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_api_keys_project"))

    op.drop_table("api_keys")
