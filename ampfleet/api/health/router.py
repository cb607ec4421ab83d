from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel
from sqlalchemy import text

from ampfleet.api.deps import SessionDep
from ampfleet.api.errors import responses

router = APIRouter(tags=["operations"])


class Health(BaseModel):
    status: str
    database: str


@router.get("/healthz", response_model=Health, responses=responses(503), summary="Liveness")
def healthz(session: SessionDep) -> Health:
    session.execute(text("SELECT 1"))  # OperationalError becomes 503 in the envelope
    return Health(status="ok", database="ok")
