"""goodput, idle policy, node telemetry

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02

What each attempt's time went to (training steps, checkpoint stalls, evaluation, steps
recomputed), as its rank 0 counted it: with the allocation rows, a job's and a project's
goodput. A project's idle policy: jobs whose utilisation stays low get told or stopped. And
each node's ranks' utilisation and memory as its last heartbeat carried them (/metrics).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "attempt_usage",
        sa.Column("job_id", sa.String(length=40), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("resumed_from_step", sa.Integer(), nullable=False),
        sa.Column("reached_step", sa.Integer(), nullable=False),
        sa.Column(
            "first_step_at",
            sa.DateTime(timezone=True),
            nullable=True,
            comment="its first step began",
        ),
        sa.Column("step_s", sa.Float(), nullable=False, comment="in steps that still stand"),
        sa.Column(
            "recomputed_s", sa.Float(), nullable=False, comment="in steps it rewound itself"
        ),
        sa.Column(
            "checkpoint_s", sa.Float(), nullable=False, comment="training blocked on saves"
        ),
        sa.Column("eval_s", sa.Float(), nullable=False),
        sa.Column(
            "marks", sa.JSON(), nullable=False, comment="[[step, step_s]] at its last saves"
        ),
        sa.Column(
            "kept_step_s",
            sa.Float(),
            nullable=True,
            comment="of step_s, up to where the next attempt resumed; null: all of it",
        ),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.id"],
            name=op.f("fk_attempt_usage_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("job_id", "attempt", name=op.f("pk_attempt_usage")),
    )
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(
            sa.Column(
                "telemetry",
                sa.JSON(),
                nullable=True,
                comment="its ranks' utilisation and memory at the last heartbeat (agent telemetry)",
            )
        )
    with op.batch_alter_table("projects") as batch:
        batch.add_column(
            sa.Column(
                "idle_policy",
                sa.JSON(),
                nullable=True,
                comment="{below_percent, window_s, action}: jobs that idle get told or stopped",
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("projects") as batch:
        batch.drop_column("idle_policy")
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("telemetry")
    op.drop_table("attempt_usage")
