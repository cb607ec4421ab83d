"""seal webhook secrets at rest

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01

Webhook secrets stored in plaintext are sealed with the server's AMPFLEET_SECRET_KEY (see
ampfleet/core/sealing.py); downgrading opens them again. Rows already sealed are left as they
are, so running it against a half-migrated table is harmless.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from ampfleet.core.sealing import is_sealed, seal, unseal
from ampfleet.core.settings import get_settings

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_webhooks = sa.table("webhooks", sa.column("id", sa.String), sa.column("secret", sa.String))


def _rewrite(sealing: bool) -> None:
    connection = op.get_bind()
    secret_key = get_settings().secret_key
    for webhook_id, stored in connection.execute(sa.select(_webhooks.c.id, _webhooks.c.secret)):
        if is_sealed(stored) == sealing:
            continue
        value = (
            seal(stored, row_id=webhook_id, secret_key=secret_key)
            if sealing
            else unseal(stored, row_id=webhook_id, secret_key=secret_key)
        )
        connection.execute(
            sa.update(_webhooks).where(_webhooks.c.id == webhook_id).values(secret=value)
        )


def upgrade() -> None:
    _rewrite(sealing=True)


def downgrade() -> None:
    _rewrite(sealing=False)
