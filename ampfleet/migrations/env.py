"""Alembic environment: the URL comes from ampfleet's settings, never from alembic.ini."""

from __future__ import annotations

from typing import Any, Literal

from alembic import context

from ampfleet.core.db import make_engine
from ampfleet.core.models import Base, UTCDateTime
from ampfleet.core.settings import get_settings

config = context.config


def render_item(type_: str, obj: Any, _autogen_context: Any) -> str | Literal[False]:
    """Render our UTCDateTime as the plain column type it stores, so revisions need no
    import of the models (they must keep working as the models change)."""
    if type_ == "type" and isinstance(obj, UTCDateTime):
        return "sa.DateTime(timezone=True)"
    return False


url = config.attributes.get("database_url") or get_settings().effective_database_url


def run_migrations_offline() -> None:
    context.configure(url=url, target_metadata=Base.metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = make_engine(url)
    with engine.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=Base.metadata,
            render_as_batch=True,  # SQLite can only ALTER through table copies
            compare_type=True,
            render_item=render_item,
        )
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
