"""Rules of a job's profiles: who may ask, when, and how a profile is answered. The states a
profile goes through, and who moves it, are core.profiles'. Flushes, never commits."""

from __future__ import annotations

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ampfleet.api.artifacts.service import artifact_url
from ampfleet.api.auth import Principal
from ampfleet.api.errors import ConflictError, NotFoundError, UnprocessableError
from ampfleet.api.jobs import service as jobs
from ampfleet.api.profiles import repository
from ampfleet.api.profiles.schemas import ProfileArtifact, ProfileList, ProfileOut, ProfileRequest
from ampfleet.core import profiles
from ampfleet.core.ids import PROFILE_ID_PREFIX, new_id
from ampfleet.core.models import Job, Profile
from ampfleet.core.profile_states import ProfileState
from ampfleet.core.states import JobState


def request(
    session: Session, job_id: str, body: ProfileRequest, principal: Principal
) -> ProfileOut:
    job = jobs.get(session, job_id, principal)
    principal.check_can_write(job.project)
    outside = [rank for rank in body.ranks or [] if rank >= job.gang_size]
    if outside:
        raise UnprocessableError.for_field(
            "ranks",
            f"the job has {job.gang_size} ranks (0 to {job.gang_size - 1}); "
            f"not one of them: {', '.join(map(str, outside))}",
        )
    # Locked until this commits: a transition out of RUNNING either came first (and this
    # sees it) or waits, and then closes the profile this adds (core.profiles.left_running).
    locked = session.get(Job, job.id, with_for_update=True, populate_existing=True)
    if locked is None or locked.state != JobState.RUNNING:
        state = locked.state if locked is not None else "gone"
        raise ConflictError(f"job {job_id} is {state}: only a RUNNING job can be profiled")
    _refuse_a_second(session, job_id)
    row = Profile(
        id=new_id(PROFILE_ID_PREFIX),
        job_id=job.id,
        attempt=locked.attempt,
        state=ProfileState.REQUESTED.value,
        steps=body.steps,
        ranks=body.ranks,
        record_shapes=body.record_shapes,
        artifacts=[],
    )
    try:
        with session.begin_nested():
            session.add(row)
            session.flush()
    except IntegrityError:  # a concurrent request's row won the one open place
        _refuse_a_second(session, job_id)
        raise ConflictError(f"job {job_id} already has a profile in progress") from None
    return to_out(session, row)


def _refuse_a_second(session: Session, job_id: str) -> None:
    existing = profiles.open_profile(session, job_id)
    if existing is not None:
        raise ConflictError(
            f"job {job_id} already has profile {existing.id} {existing.state}: one at a time; "
            f"wait for it, or cancel it with DELETE /v1/jobs/{job_id}/profile"
        )


def cancel(session: Session, job_id: str, principal: Principal) -> ProfileOut:
    job = jobs.get(session, job_id, principal)
    principal.check_can_write(job.project)
    row = profiles.open_profile(session, job_id)
    if row is None:
        raise ConflictError(f"job {job_id} has no profile requested or capturing")
    profiles.close_open(session, job_id, ProfileState.CANCELLED, "cancelled by request")
    session.refresh(row)
    return to_out(session, row)


def latest(session: Session, job_id: str, principal: Principal) -> ProfileOut:
    jobs.get(session, job_id, principal)
    rows = repository.for_job(session, job_id, limit=1)
    if not rows:
        raise NotFoundError(f"job {job_id} has no profile")
    return to_out(session, rows[0])


def one(session: Session, job_id: str, profile_id: str, principal: Principal) -> ProfileOut:
    jobs.get(session, job_id, principal)
    row = repository.by_id(session, job_id, profile_id)
    if row is None:
        raise NotFoundError(f"job {job_id} has no profile {profile_id}")
    return to_out(session, row)


def listing(session: Session, job_id: str, principal: Principal, limit: int) -> ProfileList:
    jobs.get(session, job_id, principal)
    rows = repository.for_job(session, job_id, limit)
    return ProfileList(items=[to_out(session, row) for row in rows])


def to_out(session: Session, row: Profile) -> ProfileOut:
    listed = repository.listed(session, row.job_id, row.artifacts)
    files = []
    for name in row.artifacts:
        artifact = listed.get(name)
        files.append(
            ProfileArtifact(
                name=name,
                listed=artifact is not None,
                size=artifact.size if artifact else None,
                sha256=artifact.sha256 if artifact else None,
                download_url=artifact_url(artifact) if artifact else None,
            )
        )
    return ProfileOut(
        id=row.id,
        job_id=row.job_id,
        attempt=row.attempt,
        state=ProfileState(row.state),
        steps=row.steps,
        ranks=row.ranks,
        record_shapes=row.record_shapes,
        start_step=row.start_step,
        end_step=row.end_step,
        reason=row.reason,
        artifacts=files,
        summary=row.summary,
        created_at=row.created_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
    )
