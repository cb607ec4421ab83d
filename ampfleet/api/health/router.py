"""Operations: liveness, readiness (database and broker), Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel
from sqlalchemy import text

from ampfleet.api.deps import SessionDep
from ampfleet.api.errors import ErrorDetail, ServiceUnavailableError, responses
from ampfleet.api.observability import fleet_lines, http_metrics
from ampfleet.core.messaging import broker_reachable
from ampfleet.core.settings import get_settings

router = APIRouter(tags=["operations"])


class Health(BaseModel):
    status: str
    database: str


class Readiness(BaseModel):
    status: str
    database: str
    broker: str


@router.get("/healthz", response_model=Health, responses=responses(503), summary="Liveness")
def healthz(session: SessionDep) -> Health:
    session.execute(text("SELECT 1"))  # OperationalError becomes 503 in the envelope
    return Health(status="ok", database="ok")


@router.get(
    "/readyz",
    response_model=Readiness,
    responses=responses(503),
    summary="Readiness: the database answers and the broker accepts connections",
)
def readyz(session: SessionDep) -> Readiness:
    session.execute(text("SELECT 1"))
    problem = broker_reachable()
    if problem:
        raise ServiceUnavailableError(
            "the broker is unavailable", [ErrorDetail(field="broker", message=problem)]
        )
    return Readiness(status="ready", database="ok", broker="ok")


@router.get(
    "/metrics",
    response_class=PlainTextResponse,
    summary="Prometheus metrics: jobs by state, queue depth, scheduling latency, ingest rate",
)
def metrics(session: SessionDep) -> PlainTextResponse:
    lines = fleet_lines(session, get_settings().node_timeout_s) + http_metrics.lines()
    return PlainTextResponse(
        "\n".join(lines) + "\n", media_type="text/plain; version=0.0.4; charset=utf-8"
    )
