"""Operations: liveness, readiness (database and broker), Prometheus metrics."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, BackgroundTasks, Depends, Request, Security
from fastapi.responses import PlainTextResponse
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import BaseModel

from ampfleet.api.auth import admin_principal, api_key_header, bearer, current_principal
from ampfleet.api.deps import Now, SessionDep
from ampfleet.api.errors import ServiceUnavailableError, responses
from ampfleet.api.health.service import unavailable
from ampfleet.api.observability import fleet_lines, http_metrics
from ampfleet.api.process_metrics import process_lines, python_lines
from ampfleet.core.settings import get_settings

router = APIRouter(tags=["operations"])


class Liveness(BaseModel):
    status: str


class Readiness(BaseModel):
    status: str
    database: str
    broker: str


# HEAD as well as GET, for load balancers and probes that ask without a body; kept out of
# the OpenAPI document, where it would be a second operation of the same name.
@router.head("/healthz", include_in_schema=False)
@router.get(
    "/healthz",
    response_model=Liveness,
    summary="Liveness: the process serves",
    description="200 while the process answers HTTP, whatever the database and the broker "
    "do (they are /readyz's): restart the process when this fails. Also answers HEAD.",
)
def healthz() -> Liveness:
    return Liveness(status="ok")


@router.head("/readyz", include_in_schema=False)
@router.get(
    "/readyz",
    response_model=Readiness,
    responses=responses(503),
    summary="Readiness: the database answers and the broker accepts connections",
    description="503 naming each dependency that is unavailable (one detail per field, "
    "`database` or `broker`): send no traffic here until it answers 200. Also answers HEAD.",
)
def readyz(session: SessionDep) -> Readiness:
    problems = unavailable(session)
    if problems:
        names = " and the ".join(problem.field or "" for problem in problems)
        verb = "is" if len(problems) == 1 else "are"
        raise ServiceUnavailableError(f"not ready: the {names} {verb} unavailable", problems)
    return Readiness(status="ready", database="ok", broker="ok")


async def metrics_access(
    request: Request,
    background: BackgroundTasks,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)],
    header_key: Annotated[str | None, Security(api_key_header)],
    now: Now,
) -> None:
    """Open unless AMPFLEET_METRICS_REQUIRE_KEY: then an admin key, as for the fleet's API."""
    if get_settings().metrics_require_key:
        principal = await current_principal(request, background, credentials, header_key, now)
        await admin_principal(principal)


@router.get(
    "/metrics",
    response_class=PlainTextResponse,
    responses=responses(401, 403, 429),
    dependencies=[Depends(metrics_access)],
    summary="Prometheus metrics: jobs, queue, slots, nodes, latency, points ingested, goodput",
    description="Unauthenticated unless AMPFLEET_METRICS_REQUIRE_KEY is set (then an admin "
    "key). Fleet series are the same on every API process: aggregate with `max without "
    "(instance)`. The API process's own `process_*` and `python_*` series are as "
    "prometheus_client's default collectors name them.",
)
def metrics(session: SessionDep) -> PlainTextResponse:
    settings = get_settings()
    fleet = fleet_lines(session, settings.node_timeout_s, settings.goodput_window_s)
    lines = fleet + http_metrics.lines() + process_lines() + python_lines()
    return PlainTextResponse(
        "\n".join(lines) + "\n", media_type="text/plain; version=0.0.4; charset=utf-8"
    )
