"""HTTP only: a job's profiles (rules in service.py, states in core.profiles)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, status

from ampfleet.api.auth import CurrentPrincipal
from ampfleet.api.deps import SessionDep
from ampfleet.api.errors import responses
from ampfleet.api.profiles import service
from ampfleet.api.profiles.schemas import ProfileList, ProfileOut, ProfileRequest

router = APIRouter(prefix="/v1/jobs", tags=["profiles"])
ProfileId = Annotated[str, Path(max_length=40, description="The profile's id (prf_...).")]


@router.post(
    "/{job_id}/profile",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=ProfileOut,
    operation_id="requestProfile",
    responses=responses(401, 403, 404, 409, 422),
    summary="Capture a running job's next steps with torch.profiler",
    description="The ranks start within 10 steps, all at the same step, trace `steps` steps "
    "on `ranks` (every rank by default) and store a Chrome/Perfetto trace per rank and a "
    "summary as artifacts of the job (kind `profile`). Write role. 409 unless the job is "
    "RUNNING, and while another profile of it is requested or capturing.",
)
def request_profile(
    job_id: str, body: ProfileRequest, session: SessionDep, principal: CurrentPrincipal
) -> ProfileOut:
    return service.request(session, job_id, body, principal)


@router.delete(
    "/{job_id}/profile",
    response_model=ProfileOut,
    operation_id="cancelProfile",
    responses=responses(401, 403, 404, 409),
    summary="Cancel the job's profile that is requested or capturing",
    description="The ranks stop tracing at their next check and store nothing. 409 when no "
    "profile is requested or capturing. Cancelling the job cancels its profile too.",
)
def cancel_profile(job_id: str, session: SessionDep, principal: CurrentPrincipal) -> ProfileOut:
    return service.cancel(session, job_id, principal)


@router.get(
    "/{job_id}/profile",
    response_model=ProfileOut,
    operation_id="getLatestProfile",
    responses=responses(401, 404),
    summary="The job's latest profile: its state, artifacts and summary",
)
def latest_profile(job_id: str, session: SessionDep, principal: CurrentPrincipal) -> ProfileOut:
    return service.latest(session, job_id, principal)


@router.get(
    "/{job_id}/profiles",
    response_model=ProfileList,
    operation_id="listProfiles",
    responses=responses(401, 404, 422),
    summary="The job's profiles, newest first",
)
def list_profiles(
    job_id: str,
    session: SessionDep,
    principal: CurrentPrincipal,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> ProfileList:
    return service.listing(session, job_id, principal, limit)


@router.get(
    "/{job_id}/profiles/{profile_id}",
    response_model=ProfileOut,
    operation_id="getProfile",
    responses=responses(401, 404, 422),
    summary="One profile of the job",
)
def get_profile(
    job_id: str, profile_id: ProfileId, session: SessionDep, principal: CurrentPrincipal
) -> ProfileOut:
    return service.one(session, job_id, profile_id, principal)
