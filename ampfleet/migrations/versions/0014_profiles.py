"""profiles

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01

Profiles on demand: a request to capture a running job's steps with torch.profiler, and what
became of it; at most one requested or capturing per job.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OPEN = sa.text("state IN ('requested', 'capturing')")


def upgrade() -> None:
    op.create_table(
        "profiles",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("job_id", sa.String(length=40), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False, comment="the attempt asked to capture"),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("steps", sa.Integer(), nullable=False, comment="steps to capture"),
        sa.Column("ranks", sa.JSON(), nullable=True, comment="null: every rank"),
        sa.Column("record_shapes", sa.Boolean(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True, comment="why it failed or was cancelled"),
        sa.Column("start_step", sa.Integer(), nullable=True, comment="the first step captured"),
        sa.Column("end_step", sa.Integer(), nullable=True, comment="the last step captured"),
        sa.Column("artifacts", sa.JSON(), nullable=False, comment="names it lists"),
        sa.Column("summary", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_profiles_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_profiles")),
    )
    with op.batch_alter_table("profiles", schema=None) as batch_op:
        batch_op.create_index(
            "ix_profiles_job_id_created_at", ["job_id", "created_at"], unique=False
        )
        batch_op.create_index(
            "uq_profiles_one_open_per_job",
            ["job_id"],
            unique=True,
            postgresql_where=OPEN,
            sqlite_where=OPEN,
        )


def downgrade() -> None:
    with op.batch_alter_table("profiles", schema=None) as batch_op:
        batch_op.drop_index("uq_profiles_one_open_per_job")
        batch_op.drop_index("ix_profiles_job_id_created_at")

    op.drop_table("profiles")
