"""sweeps

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-03

Sweeps (hyperparameter and precision searches) and their trials; a job names the sweep and
the trial number it runs for.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BigIntId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "sweeps",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("project", sa.String(64), nullable=False),
        sa.Column("name", sa.String(128), nullable=True),
        sa.Column("spec", sa.JSON(), nullable=False, comment="the sweep spec with defaults filled"),
        sa.Column(
            "base_resolved",
            sa.JSON(),
            nullable=False,
            comment="the base job spec resolved once, at submit (inputs, init_from)",
        ),
        sa.Column("state", sa.String(16), nullable=False, comment="RUNNING | SUCCEEDED..."),
        sa.Column("reason", sa.Text(), nullable=True, comment="why it ended"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sweeps")),
    )
    op.create_index(op.f("ix_sweeps_project"), "sweeps", ["project"])
    op.create_index(op.f("ix_sweeps_state"), "sweeps", ["state"])
    op.create_table(
        "sweep_trials",
        sa.Column("id", BigIntId, autoincrement=True, nullable=False),
        sa.Column("sweep_id", sa.String(40), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column(
            "job_id",
            sa.String(40),
            nullable=True,
            comment="null: its job could never be admitted (reason says)",
        ),
        sa.Column(
            "state",
            sa.String(16),
            nullable=False,
            comment="running | complete | pruned | failed | cancelled",
        ),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("distributions", sa.JSON(), nullable=False, comment="Optuna's, as JSON"),
        sa.Column("system_attrs", sa.JSON(), nullable=False),
        sa.Column(
            "intermediate",
            sa.JSON(),
            nullable=False,
            comment="{step: value} of the pruner's metric, as told to the pruner",
        ),
        sa.Column("values", sa.JSON(), nullable=True, comment="one per objective"),
        sa.Column(
            "measures",
            sa.JSON(),
            nullable=False,
            comment="what the platform measured: samples/s, slot-seconds, precision",
        ),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["sweep_id"],
            ["sweeps.id"],
            name=op.f("fk_sweep_trials_sweep_id_sweeps"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sweep_trials")),
        sa.UniqueConstraint("sweep_id", "number", name="uq_sweep_trials_sweep_id_number"),
        sa.UniqueConstraint("job_id", name=op.f("uq_sweep_trials_job_id")),
    )
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(
            sa.Column(
                "sweep_id",
                sa.String(40),
                nullable=True,
                comment="the sweep it is a trial of; null: a plain job",
            )
        )
        batch.add_column(
            sa.Column("trial", sa.Integer(), nullable=True, comment="its trial number in the sweep")
        )
        batch.create_index(op.f("ix_jobs_sweep_id"), ["sweep_id"])


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_index(op.f("ix_jobs_sweep_id"))
        batch.drop_column("trial")
        batch.drop_column("sweep_id")
    op.drop_table("sweep_trials")
    op.drop_index(op.f("ix_sweeps_state"), "sweeps")
    op.drop_index(op.f("ix_sweeps_project"), "sweeps")
    op.drop_table("sweeps")
