"""job trace context

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-03

The W3C trace context (traceparent, tracestate) of a job's submit, which the scheduler and
the node agents continue: one trace per job (core/tracing.py). Null where it was not traced.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(
            sa.Column(
                "trace_context",
                sa.JSON(),
                nullable=True,
                comment="W3C trace context of its submit (core/tracing.py); null: not traced",
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("trace_context")
