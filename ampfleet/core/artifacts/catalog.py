"""The `artifacts` rows and the objects they name: listing one, keep-last-K, and which objects
no row (of `artifacts` or `bundles`) needs any more. Written once here for the node agent
(uploads, pruning) and the API (a job's or a bundle's deletion), so the rule "an object goes
only when no row names it" has one home.

Objects are shared by content: two rows (of one job or of two) may name the same sha256, so
deleting a row never deletes its object by itself; `unreferenced` says which may go, and the
caller deletes them from the store after its transaction committed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ampfleet.core.artifacts import StoredObject
from ampfleet.core.ids import new_id
from ampfleet.core.models import Artifact, Bundle, Dataset, Job

CHECKPOINT = "checkpoint"
TAR = "application/x-tar"


def list_artifact(
    session: Session,
    job: Job,
    *,
    kind: str,
    name: str,
    attempt: int,
    step: int | None,
    stored: StoredObject,
    content_type: str,
    details: dict[str, Any],
) -> str | None:
    """Lists a complete object under (job, name), idempotently: listing the same bytes again
    changes nothing; other bytes under the name (a step saved again after a rewind) replace
    the row. Returns the sha256 the row no longer names, if any."""
    fields = {
        "kind": kind,
        "attempt": attempt,
        "step": step,
        "size": stored.size,
        "sha256": stored.sha256,
        "content_type": content_type,
        "details": details,
    }
    for _ in range(2):  # a second pass only after losing an insert race to another lister
        row = session.scalar(
            select(Artifact).where(Artifact.job_id == job.id, Artifact.name == name)
        )
        if row is not None:
            if row.sha256 == stored.sha256:
                return None
            replaced = row.sha256
            for field, value in fields.items():
                setattr(row, field, value)
            session.flush()
            return replaced
        try:
            with session.begin_nested():
                session.add(
                    Artifact(
                        id=new_id("art"), job_id=job.id, project=job.project, name=name, **fields
                    )
                )
            return None
        except IntegrityError:
            continue
    raise RuntimeError(f"could not list artifact {name!r} of job {job.id}")


def prune_checkpoints(session: Session, job_id: str, keep_last: int) -> list[str]:
    """Keeps the job's newest `keep_last` checkpoint rows; the sha256s of those deleted."""
    rows = session.scalars(
        select(Artifact)
        .where(Artifact.job_id == job_id, Artifact.kind == CHECKPOINT)
        .order_by(Artifact.step.desc(), Artifact.created_at.desc())
    ).all()
    dropped = rows[keep_last:]
    for row in dropped:
        session.delete(row)
    session.flush()
    return [row.sha256 for row in dropped]


def unreferenced(session: Session, sha256s: Iterable[str]) -> list[str]:
    """Of these digests, those no row names any more (their objects may be deleted)."""
    wanted = set(sha256s)
    if not wanted:
        return []
    still = set(session.scalars(select(Artifact.sha256).where(Artifact.sha256.in_(wanted))))
    still |= set(session.scalars(select(Bundle.sha256).where(Bundle.sha256.in_(wanted))))
    still |= set(session.scalars(select(Dataset.sha256).where(Dataset.sha256.in_(wanted))))
    return sorted(wanted - still)


def latest_checkpoint(session: Session, job_id: str) -> Artifact | None:
    return session.scalar(
        select(Artifact)
        .where(Artifact.job_id == job_id, Artifact.kind == CHECKPOINT)
        .order_by(Artifact.step.desc(), Artifact.created_at.desc())
        .limit(1)
    )
