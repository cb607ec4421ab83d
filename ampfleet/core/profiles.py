"""A profile's life (its states: core/profile_states.py), written once for every process that
moves it: the API requests and cancels one, the node agent hands it to the ranks and stores
what they report, the uploader lists its files, and a job that leaves RUNNING takes its open
profile with it.

Every change is a conditional UPDATE on the states it may leave, so a late report (the
ranks finishing a capture that was cancelled meanwhile) changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from ampfleet.core.artifact_names import PROFILES_PREFIX
from ampfleet.core.models import Artifact, Profile, utcnow
from ampfleet.core.profile_states import OPEN_STATES, ProfileState
from ampfleet.core.states import JobState

_OPEN = [s.value for s in OPEN_STATES]


def _move(
    session: Session, profile_ids: Iterable[str], sources: Iterable[ProfileState], **values: Any
) -> int:
    ids = list(profile_ids)
    if not ids:
        return 0
    result = session.execute(
        update(Profile)
        .where(Profile.id.in_(ids), Profile.state.in_([s.value for s in sources]))
        .values(**values)
        .execution_options(synchronize_session="fetch")
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


def open_profile(session: Session, job_id: str) -> Profile | None:
    return session.scalar(
        select(Profile).where(Profile.job_id == job_id, Profile.state.in_(_OPEN)).limit(1)
    )


def close_open(session: Session, job_id: str, state: ProfileState, reason: str) -> None:
    """Ends the job's open profile (if any) as `state` (cancelled or failed) with `reason`."""
    ids = session.scalars(
        select(Profile.id).where(Profile.job_id == job_id, Profile.state.in_(_OPEN))
    ).all()
    _move(session, ids, OPEN_STATES, state=state.value, reason=reason, finished_at=utcnow())


def left_running(session: Session, job_id: str, to: JobState) -> None:
    """The job left RUNNING (core.lifecycle.transition): its ranks will not take or finish
    an open profile."""
    if to is JobState.CANCELLING:
        close_open(session, job_id, ProfileState.CANCELLED, "the job is being cancelled")
    else:
        close_open(
            session,
            job_id,
            ProfileState.FAILED,
            f"the job went {to.value} before the profile was complete",
        )


def requests_for(session: Session, attempts: Iterable[tuple[str, int]]) -> dict[str, Profile]:
    """The open profile of each (job, attempt), by job id: what the node hands its ranks."""
    wanted = dict(attempts)
    if not wanted:
        return {}
    rows = session.scalars(
        select(Profile).where(Profile.job_id.in_(list(wanted)), Profile.state.in_(_OPEN))
    ).all()
    return {row.job_id: row for row in rows if row.attempt == wanted[row.job_id]}


def apply_report(session: Session, record: dict[str, Any]) -> str | None:
    """A `profile` record of rank 0: the capture began, ended (its files are being stored)
    or failed. Returns what to tell in a job event, if anything."""
    profile_id, state = str(record.get("profile_id")), record.get("state")
    if state == ProfileState.CAPTURING:
        _move(
            session,
            [profile_id],
            {ProfileState.REQUESTED},
            state=ProfileState.CAPTURING.value,
            start_step=int(record["start_step"]),
            started_at=utcnow(),
        )
    elif state == ProfileState.UPLOADING:
        names = [str(name) for name in record.get("artifacts", [])]
        moved = _move(
            session,
            [profile_id],
            OPEN_STATES,
            state=ProfileState.UPLOADING.value,
            start_step=int(record["start_step"]),
            end_step=int(record["end_step"]),
            artifacts=names,
            summary=record.get("summary"),
        )
        if moved:
            settle(session, profile_id)
            return (
                f"{profile_id}: steps {record['start_step']}-{record['end_step']} captured on "
                f"ranks {', '.join(map(str, record.get('ranks', [])))}; traces and summary "
                f"under {PROFILES_PREFIX}{profile_id}/"
            )
    elif state == ProfileState.FAILED:
        _move(
            session,
            [profile_id],
            OPEN_STATES,
            state=ProfileState.FAILED.value,
            reason=str(record.get("reason", "the ranks could not take the profile"))[:2000],
            finished_at=utcnow(),
        )
    return None


def settle(session: Session, profile_id: str) -> None:
    """An uploading profile is done once every file it names is listed (the ranks' report
    and the listings may come in either order, from several nodes)."""
    profile = session.get(Profile, profile_id, populate_existing=True)
    if profile is None or profile.state != ProfileState.UPLOADING:
        return
    listed = set(
        session.scalars(
            select(Artifact.name).where(
                Artifact.job_id == profile.job_id, Artifact.name.in_(profile.artifacts)
            )
        )
    )
    if listed >= set(profile.artifacts):
        _move(
            session,
            [profile_id],
            {ProfileState.UPLOADING},
            state=ProfileState.DONE.value,
            finished_at=utcnow(),
        )


def profile_of(name: str) -> str | None:
    """The profile id in an artifact name `profiles/<id>/<file>`, if it is one."""
    if not name.startswith(PROFILES_PREFIX):
        return None
    profile_id, _, rest = name.removeprefix(PROFILES_PREFIX).partition("/")
    return profile_id if rest else None


def artifact_listed(session: Session, name: str) -> None:
    """The uploader listed one of a profile's files."""
    profile_id = profile_of(name)
    if profile_id is not None:
        settle(session, profile_id)


def upload_failed(session: Session, name: str, message: str) -> None:
    """The uploader gave up on one of a profile's files: the profile cannot be whole."""
    profile_id = profile_of(name)
    if profile_id is not None:
        _move(
            session,
            [profile_id],
            {ProfileState.UPLOADING, *OPEN_STATES},
            state=ProfileState.FAILED.value,
            reason=f"{name} could not be stored: {message}"[:2000],
            finished_at=utcnow(),
        )
