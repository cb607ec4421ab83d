"""Deleting a job: its rows go in the request's unit of work, then the store objects that no
other row names (catalog.unreferenced: objects are shared by content, so another job's row,
or a bundle, may name the same bytes) go after the commit.

Only a terminal job: one that runs still writes rows and uploads objects. Removing an object
is best effort: a store that fails leaves an orphan (space, never correctness), logged with
its digest. The node's local checkpoint folder of the job is left to the node's own cleanup.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sqlalchemy.orm import Session

from ampfleet.api.auth import Principal
from ampfleet.api.datasets.repository import unfinished_jobs_reading
from ampfleet.api.errors import ConflictError
from ampfleet.api.jobs import repository, service
from ampfleet.core.artifacts import get_store, object_key
from ampfleet.core.artifacts.catalog import unreferenced
from ampfleet.core.db import session_scope
from ampfleet.core.states import JobState

log = logging.getLogger(__name__)


def delete(session: Session, job_id: str, principal: Principal) -> list[str]:
    """Deletes the job's rows; the sha256s whose objects may go once this commits."""
    job = service.get(session, job_id, principal)
    principal.check_can_write(job.project)
    state = JobState(job.state)
    if not state.is_terminal():
        raise ConflictError(
            f"job {job_id} is {state.value}: only a job that ended can be deleted (cancel it first)"
        )
    readers = unfinished_jobs_reading(session, job.project, lambda item: item.get("job") == job_id)
    if readers:
        raise ConflictError(
            f"job {job_id}'s model is an input of unfinished jobs ({', '.join(readers)}); "
            "delete it once they ended"
        )
    return repository.delete_job(session, job)


def drop_unreferenced_objects(sha256s: Sequence[str]) -> None:
    """After the deleting transaction committed: each object goes when no row names it."""
    with session_scope() as session:
        garbage = unreferenced(session, sha256s)
    store = get_store()
    for digest in garbage:
        try:
            store.delete(object_key(digest))
        except Exception as exc:  # an object left behind costs space, never correctness
            log.warning("artifact object %s not deleted: %s", digest, type(exc).__name__)
