"""Idempotency-Key for POST /v1/jobs, per the IETF draft (idempotency-key-header).

- The first request with a key makes the job (202). A request with the same key and body
  made while that one is still in flight is answered 409 with Retry-After (it would only
  wait for, or race, the first); one made after it finished is a replay: 200 with the job's
  current state and its Location. The same key with another body is 422.
- A key lives AMPFLEET_IDEMPOTENCY_KEY_TTL_S after the job it made was submitted; after
  that it is free again: the next request with it makes a new job.

In flight means holding the key's claim until the submitting transaction ends: on
PostgreSQL a transaction-scoped advisory lock (every API process sees it); on SQLite, which
the embedded default serves from one API process, a set in that process.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ampfleet.api.errors import ConflictError
from ampfleet.core.db import is_postgres
from ampfleet.core.models import Job, utcnow

RETRY_AFTER_S = 1


class KeyInFlightError(ConflictError):
    code = "idempotency_key_in_flight"
    headers = {"Retry-After": str(RETRY_AFTER_S)}


_claimed: set[tuple[str, str]] = set()
_claimed_lock = threading.Lock()


def _lock_id(project: str, key: str) -> int:
    digest = hashlib.blake2b(f"idempotency\0{project}\0{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


@contextmanager
def claim(session: Session, project: str, key: str) -> Iterator[None]:
    """Hold the key while the caller's transaction makes its job; 409 if another holds it."""
    refusal = KeyInFlightError(
        f"a request with Idempotency-Key {key!r} is still in flight; retry in "
        f"{RETRY_AFTER_S} s for its answer"
    )
    if is_postgres(session):
        if not session.scalar(select(func.pg_try_advisory_xact_lock(_lock_id(project, key)))):
            raise refusal
        yield  # released when the transaction ends
        return
    with _claimed_lock:
        if (project, key) in _claimed:
            raise refusal
        _claimed.add((project, key))
    try:
        yield
    finally:
        with _claimed_lock:
            _claimed.discard((project, key))


def expired(job: Job, ttl_s: float) -> bool:
    return job.created_at < utcnow() - timedelta(seconds=ttl_s)
