"""console login tokens

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-04

One-time login tokens for the console (`ampfleet ui`): the keyed hash of each, the key it
acts for, when it lapses and when it was exchanged (api/console_login/).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "console_login_tokens",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("key_id", sa.String(40), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "used_at", sa.DateTime(timezone=True), nullable=True, comment="null: not exchanged yet"
        ),
        sa.ForeignKeyConstraint(
            ["key_id"],
            ["api_keys.id"],
            name=op.f("fk_console_login_tokens_key_id_api_keys"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_console_login_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_console_login_tokens_token_hash")),
    )
    op.create_index(op.f("ix_console_login_tokens_key_id"), "console_login_tokens", ["key_id"])
    op.create_index(
        op.f("ix_console_login_tokens_expires_at"), "console_login_tokens", ["expires_at"]
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_console_login_tokens_expires_at"), "console_login_tokens")
    op.drop_index(op.f("ix_console_login_tokens_key_id"), "console_login_tokens")
    op.drop_table("console_login_tokens")
