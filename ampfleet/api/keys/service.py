"""Rules of the keys resource: who may make, see and revoke which keys. Flushes, never
commits; the key itself is shown once, at creation, and stored hashed (core/keys.py)."""

from __future__ import annotations

from sqlalchemy import event
from sqlalchemy.orm import Session

from ampfleet.api.auth import ForbiddenError, Principal, ProjectScope
from ampfleet.api.errors import ConflictError, NotFoundError
from ampfleet.api.key_cache import verified_keys
from ampfleet.api.keys import repository
from ampfleet.api.keys.schemas import CreatedKey, KeyIn, KeyList, KeyOut
from ampfleet.core.keys import create_key
from ampfleet.core.models import ApiKey, utcnow
from ampfleet.core.roles import Role
from ampfleet.core.settings import get_settings


def to_out(row: ApiKey) -> KeyOut:
    return KeyOut.model_validate(row, from_attributes=True)


def create(session: Session, body: KeyIn, principal: Principal) -> CreatedKey:
    """Admin: any project and role; a write key: keys of its own project, not admin ones;
    either only while the project holds fewer active keys than its cap (409 past it)."""
    project = body.project or principal.project
    principal.check_can_write(project)
    if body.role is Role.ADMIN and not principal.is_admin:
        raise ForbiddenError("only an admin key can create admin keys")
    settings = get_settings()
    repository.lock_project_keys(session, project)
    active = repository.count_active(session, project)
    if active >= settings.max_keys_per_project:
        raise ConflictError(
            f"project {project} has {active} active keys, the most it may hold "
            f"(AMPFLEET_MAX_KEYS_PER_PROJECT={settings.max_keys_per_project}); revoke one first"
        )
    row, key = create_key(
        session,
        project=project,
        role=body.role,
        name=body.name,
        pepper=settings.secret_key,
    )
    return CreatedKey(**to_out(row).model_dump(), key=key)


def listing(session: Session, scope: ProjectScope) -> KeyList:
    return KeyList(items=[to_out(row) for row in repository.listing(session, scope)])


def revoke(session: Session, key_id: str, principal: Principal) -> None:
    """It stops working at once on this API process, and within `key_cache_ttl_s` on the
    others (api/key_cache.py); revoking twice is harmless."""
    row = repository.get(session, key_id)
    if row is None:
        raise NotFoundError(f"key {key_id} not found")
    principal.check_visible(row.project, f"key {key_id}")
    principal.check_can_write(row.project)
    if row.role == Role.ADMIN and not principal.is_admin:
        raise ForbiddenError("only an admin key can revoke admin keys")
    if row.revoked_at is None:
        row.revoked_at = utcnow()
        session.flush()
    # Forgotten once the revocation is committed: a request verifying the key before then
    # would remember it again, for the TTL.
    event.listen(session, "after_commit", lambda _: verified_keys.forget(key_id), once=True)
