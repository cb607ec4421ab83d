"""HTTP only: the diagnosis of one job (rules in rules.py, figures in repository.py)."""

from __future__ import annotations

from fastapi import APIRouter

from ampfleet.api.auth import CurrentPrincipal
from ampfleet.api.deps import SessionDep
from ampfleet.api.diagnosis import service
from ampfleet.api.diagnosis.schemas import DiagnosisOut
from ampfleet.api.errors import responses

router = APIRouter(prefix="/v1/jobs", tags=["diagnosis"])


@router.get(
    "/{job_id}/diagnosis",
    response_model=DiagnosisOut,
    responses=responses(401, 404),
    summary="Why the job's accelerators idle: its latest steps' breakdown and findings",
)
def job_diagnosis(job_id: str, session: SessionDep, principal: CurrentPrincipal) -> DiagnosisOut:
    return service.diagnosis(session, job_id, principal)
