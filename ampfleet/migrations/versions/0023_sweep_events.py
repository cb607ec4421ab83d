"""sweep events

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-10

A sweep's events (a trial started, pruned, ended; the sweep ended), which its event stream
reads and webhooks deliver; a webhook names the sweep events it wants beside job states.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BigIntId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "sweep_events",
        sa.Column("id", BigIntId, autoincrement=True, nullable=False),
        sa.Column("sweep_id", sa.String(40), nullable=False),
        sa.Column("time", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "type", sa.String(32), nullable=False, comment="sweep.trial_pruned, sweep.succeeded..."
        ),
        sa.Column(
            "trial", sa.Integer(), nullable=True, comment="its trial number; null: the sweep's"
        ),
        sa.Column("job_id", sa.String(40), nullable=True, comment="the trial's job"),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column(
            "details",
            sa.JSON(),
            nullable=False,
            comment="the trial's params, values and state; the sweep's counts",
        ),
        sa.ForeignKeyConstraint(
            ["sweep_id"],
            ["sweeps.id"],
            name=op.f("fk_sweep_events_sweep_id_sweeps"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sweep_events")),
    )
    op.create_index("ix_sweep_events_sweep_id_id", "sweep_events", ["sweep_id", "id"])
    with op.batch_alter_table("webhooks") as batch:
        batch.add_column(
            sa.Column(
                "sweep_events",
                sa.JSON(),
                server_default="[]",
                nullable=False,
                comment='sweep event types (sweep.trial_pruned...), or ["*"]',
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("webhooks") as batch:
        batch.drop_column("sweep_events")
    op.drop_index("ix_sweep_events_sweep_id_id", "sweep_events")
    op.drop_table("sweep_events")
