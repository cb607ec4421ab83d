"""The fair baselines for bench/api.py: a bare FastAPI app with the same JobSpec model doing
the same database statements as ours, and nothing else.

`/bare/jobs`: what the requests need, read plainly (and what ours did before its caches):
POST reads the key, the nodes and the project, then inserts the job, its event and the
submission counter in one transaction; GET reads the key, the job, its allocations and its
attempt usage. `/lean/jobs`: exactly the statements ours issues now in steady load, counted
with SQLAlchemy's cursor events (the key and the node list come from its caches, a queued
job's GET skips the goodput reads): POST reads the project and makes the three inserts, GET
reads the job. Both on the same tables through the same engine, with sync routes in the same
thread pool: against `/lean` the ratio is what ours adds on top of the database (rules,
auth, rate limit, middleware, logging, tracing).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, HTTPException
from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from ampfleet.core.db import get_sessionmaker
from ampfleet.core.ids import new_id
from ampfleet.core.models import (
    Allocation,
    ApiKey,
    AttemptUsage,
    FleetCounter,
    Job,
    JobEvent,
    Node,
    Project,
    utcnow,
)
from ampfleet.core.settings import get_settings
from ampfleet.core.spec import JobSpec

app = FastAPI()


def session() -> Iterator[Session]:
    with get_sessionmaker()() as db, db.begin():
        yield db


# Committed before the response goes out, as ours does (a client that reads right after
# its write must see it); FastAPI's default would commit after the response is sent.
SessionDep = Annotated[Session, Depends(session, scope="function")]


def key(db: Session, authorization: str) -> ApiKey:
    _, _, presented = authorization.partition(" ")
    _, prefix, secret = [*presented.split("_", 2), "", "", ""][:3]
    row = db.scalars(select(ApiKey).where(ApiKey.prefix == prefix)).one_or_none()
    pepper = get_settings().secret_key.encode()
    digest = hmac.new(pepper, secret.encode(), hashlib.sha256).hexdigest()
    if row is None or not hmac.compare_digest(row.secret_hash, digest):
        raise HTTPException(401)
    return row


@app.post("/bare/jobs", status_code=202)
def submit(spec: JobSpec, db: SessionDep, authorization: Annotated[str, Header()]) -> dict:
    owner = key(db, authorization)
    db.execute(select(Node.id, Node.accelerator, Node.slots, Node.state, Node.labels)).all()
    db.get(Project, owner.project)
    return _insert(db, spec, owner.project)


def _insert(db: Session, spec: JobSpec, project: str) -> dict:
    job = Job(
        id=new_id("job"),
        project=project,
        recipe=spec.recipe or "",
        spec=spec.model_dump(mode="json", exclude_unset=True),
        resolved=spec.model_dump(mode="json"),
        state="QUEUED",
        priority=0,
        gang_size=1,
    )
    db.add(job)
    db.flush()
    db.add(JobEvent(job_id=job.id, attempt=0, kind="transition", to_state="QUEUED", reason="x"))
    counter = {"name": "jobs_submitted", "label": "", "shard": "bare", "value": 1.0}
    upsert = insert(FleetCounter).values(**counter)
    db.execute(
        upsert.on_conflict_do_update(
            index_elements=["name", "label", "shard"],
            set_={"value": FleetCounter.value + upsert.excluded.value},
        )
    )
    return {"id": job.id, "state": job.state, "created_at": utcnow().isoformat()}


@app.post("/lean/jobs", status_code=202)
def submit_lean(spec: JobSpec, db: SessionDep, authorization: Annotated[str, Header()]) -> dict:
    owner = _remembered(authorization)
    db.get(Project, owner)
    return _insert(db, spec, owner)


@app.get("/lean/jobs/{job_id}")
def get_lean(
    job_id: str, db: SessionDep, authorization: Annotated[str, Header()]
) -> dict[str, Any]:
    owner = _remembered(authorization)
    job = db.scalars(select(Job).where(Job.id == job_id, Job.project == owner)).first()
    if job is None:
        raise HTTPException(404)
    return {"id": job.id, "state": job.state, "spec": job.spec, "resolved": job.resolved}


_keys: dict[str, str] = {}


def _remembered(authorization: str) -> str:
    """The key's project, read once (ours remembers keys for 2 s)."""
    digest = hashlib.sha256(authorization.encode()).hexdigest()
    if digest not in _keys:
        with get_sessionmaker()() as db:
            _keys[digest] = key(db, authorization).project
    return _keys[digest]


@app.get("/bare/jobs/{job_id}")
def get(job_id: str, db: SessionDep, authorization: Annotated[str, Header()]) -> dict[str, Any]:
    owner = key(db, authorization)
    job = db.scalars(select(Job).where(Job.id == job_id, Job.project == owner.project)).first()
    if job is None:
        raise HTTPException(404)
    db.scalars(select(Allocation).where(Allocation.job_id == job_id)).all()
    db.scalars(select(AttemptUsage).where(AttemptUsage.job_id == job_id)).all()
    return {"id": job.id, "state": job.state, "spec": job.spec, "resolved": job.resolved}
