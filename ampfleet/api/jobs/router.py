"""HTTP of the jobs resource; rules live in service.py, queries in repository.py."""

from __future__ import annotations

import base64
import binascii
import re
from typing import Annotated

from fastapi import APIRouter, Header, Query, Response, status

from ampfleet.api.deps import SessionDep
from ampfleet.api.errors import UnprocessableError, responses
from ampfleet.api.jobs import repository, service
from ampfleet.api.jobs.schemas import (
    EventList,
    EventOut,
    JobOut,
    JobPage,
    MetricPoint,
    MetricSeries,
    MetricsOut,
)
from ampfleet.core.messaging import wake_scheduler
from ampfleet.core.spec import JobSpec
from ampfleet.core.states import JobState

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

MAX_METRIC_POINTS = 100_000
JOB_ID = re.compile(r"job_[0-9a-z]{26}")


@router.post(
    "",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobOut,
    responses=responses(413, 422, 503),
    summary="Submit a training job",
)
def submit_job(
    spec: JobSpec,
    session: SessionDep,
    response: Response,
    idempotency_key: Annotated[
        str | None,
        Header(max_length=128, description="Same key and body return the same job."),
    ] = None,
) -> JobOut:
    job, created = service.submit(session, spec, idempotency_key)
    session.commit()  # the job must be durable before the scheduler is woken for it
    if created:
        wake_scheduler()
    else:
        response.status_code = status.HTTP_200_OK
    response.headers["Location"] = f"/v1/jobs/{job.id}"
    return service.to_out(job)


@router.get("", response_model=JobPage, responses=responses(422), summary="List jobs")
def list_jobs(
    session: SessionDep,
    state: Annotated[list[JobState] | None, Query(description="Repeat to match any.")] = None,
    project: Annotated[str | None, Query(max_length=64)] = None,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> JobPage:
    jobs = repository.page(
        session,
        states=[s.value for s in state or []],
        project=project,
        before_id=_decode_cursor(cursor) if cursor else None,
        limit=limit + 1,
    )
    next_cursor = _encode_cursor(jobs[limit - 1].id) if len(jobs) > limit else None
    return JobPage(items=[service.to_out(j) for j in jobs[:limit]], next_cursor=next_cursor)


@router.get("/{job_id}", response_model=JobOut, responses=responses(404), summary="Get a job")
def get_job(job_id: str, session: SessionDep) -> JobOut:
    return service.to_out(service.get(session, job_id))


@router.post(
    "/{job_id}/cancel",
    response_model=JobOut,
    status_code=status.HTTP_202_ACCEPTED,
    responses=responses(404, 409),
    summary="Cancel a job",
    description="A job not yet placed ends CANCELLED at once; a placed one goes CANCELLING "
    "while its node stops every rank, then CANCELLED. Cancelling twice is harmless.",
)
def cancel_job(job_id: str, session: SessionDep) -> JobOut:
    return service.to_out(service.cancel(session, job_id))


@router.get(
    "/{job_id}/events",
    response_model=EventList,
    responses=responses(404, 422),
    summary="State transitions and other events, oldest first",
)
def job_events(
    job_id: str,
    session: SessionDep,
    after: Annotated[int, Query(ge=0, description="Only events with a larger id.")] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 500,
) -> EventList:
    service.get(session, job_id)
    events = repository.events(session, job_id, after, limit)
    return EventList(items=[EventOut.model_validate(e, from_attributes=True) for e in events])


@router.get(
    "/{job_id}/metrics",
    response_model=MetricsOut,
    responses=responses(404, 422),
    summary="Metric series of a job",
)
def job_metrics(
    job_id: str,
    session: SessionDep,
    names: Annotated[str | None, Query(description="Comma-separated metric names.")] = None,
    from_step: Annotated[int | None, Query(ge=0)] = None,
    to_step: Annotated[int | None, Query(ge=0)] = None,
) -> MetricsOut:
    service.get(session, job_id)
    wanted = [n.strip() for n in names.split(",") if n.strip()] if names else []
    rows = repository.metrics(
        session,
        job_id,
        names=wanted,
        from_step=from_step,
        to_step=to_step,
        limit=MAX_METRIC_POINTS,
    )
    series: dict[str, list[MetricPoint]] = {}
    for row in rows:
        series.setdefault(row.name, []).append(
            MetricPoint(step=row.step, value=row.value, time=row.time)
        )
    return MetricsOut(
        job_id=job_id, series=[MetricSeries(name=n, points=p) for n, p in series.items()]
    )


def _encode_cursor(job_id: str) -> str:
    return base64.urlsafe_b64encode(job_id.encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> str:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        job_id = base64.b64decode(padded, altchars=b"-_", validate=True).decode("ascii")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        job_id = ""
    if not JOB_ID.fullmatch(job_id):
        raise UnprocessableError.for_field("cursor", "not a cursor this API returned")
    return job_id
