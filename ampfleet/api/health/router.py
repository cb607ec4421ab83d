"""Operations: liveness, readiness (database and broker), Prometheus metrics."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, BackgroundTasks, Depends, Request, Security
from fastapi.responses import PlainTextResponse
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import BaseModel
from sqlalchemy import text

from ampfleet.api.auth import admin_principal, api_key_header, bearer, current_principal
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


def metrics_access(
    request: Request,
    background: BackgroundTasks,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)],
    header_key: Annotated[str | None, Security(api_key_header)],
) -> None:
    """Open unless AMPFLEET_METRICS_REQUIRE_KEY: then an admin key, as for the fleet's API."""
    if get_settings().metrics_require_key:
        admin_principal(current_principal(request, background, credentials, header_key))


@router.get(
    "/metrics",
    response_class=PlainTextResponse,
    responses=responses(401, 403, 429),
    dependencies=[Depends(metrics_access)],
    summary="Prometheus metrics: jobs, queue, nodes, scheduling latency, points ingested, goodput",
    description="Unauthenticated unless AMPFLEET_METRICS_REQUIRE_KEY is set (then an admin "
    "key). Fleet series are the same on every API process: aggregate with `max without "
    "(instance)`.",
)
def metrics(session: SessionDep) -> PlainTextResponse:
    settings = get_settings()
    fleet = fleet_lines(session, settings.node_timeout_s, settings.goodput_window_s)
    lines = fleet + http_metrics.lines()
    return PlainTextResponse(
        "\n".join(lines) + "\n", media_type="text/plain; version=0.0.4; charset=utf-8"
    )
