"""HTTP of the jobs resource; rules live in service.py, queries in repository.py."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, BackgroundTasks, Depends, Header, Path, Query, Response, status
from fastapi.responses import StreamingResponse

from ampfleet.api import stream_tokens
from ampfleet.api.auth import CurrentPrincipal, ListingScope, Principal
from ampfleet.api.bounds import MAX_ID, MAX_INT
from ampfleet.api.deps import ReadSessionDep, SessionDep, ends_unit_of_work
from ampfleet.api.errors import responses
from ampfleet.api.jobs import checkpoint_export, deletion, idempotency, repository, service
from ampfleet.api.jobs.schemas import (
    CheckpointExport,
    EventList,
    EventOut,
    JobOut,
    JobPage,
    JobPatch,
)
from ampfleet.api.jobs.stream import stream_job
from ampfleet.api.serialized import json_response
from ampfleet.api.stream_tokens import StreamToken, stream_principal
from ampfleet.api.streaming import stream_response_doc, wants_stream
from ampfleet.core.db import after_commit
from ampfleet.core.messaging import wake_scheduler
from ampfleet.core.spec import JobSpec
from ampfleet.core.states import JobState

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

JOB_CURSOR_PATTERN = r"^[A-Za-z0-9_-]{40}$"  # a job id, base64url without padding


@router.post(
    "",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobOut,
    responses={
        200: {
            "model": JobOut,
            "description": "A replay: an earlier request with this Idempotency-Key and body "
            "made this job; the body is its current state",
        },
        **responses(401, 403, 409, 413, 422, 429, 503),
    },
    summary="Submit a training job",
    description="Refused with 422 when the job can never fit the fleet as registered "
    "(requested vs the largest matching node), with 429 when its project's queue is full. "
    "With an Idempotency-Key: 202 makes the job; a retry after that answers 200 with the "
    "same job; a retry while the first request is still in flight answers 409 with "
    "Retry-After; the same key with another body answers 422. A key is remembered for "
    "AMPFLEET_IDEMPOTENCY_KEY_TTL_S (a day) after its job was submitted, then free again.",
)
@ends_unit_of_work
def submit_job(
    spec: JobSpec,
    session: SessionDep,
    reader: ReadSessionDep,
    principal: CurrentPrincipal,
    idempotency_key: Annotated[
        str | None,
        Header(
            max_length=128,
            description="Same key and body return the same job, for a day (the server's "
            "AMPFLEET_IDEMPOTENCY_KEY_TTL_S).",
        ),
    ] = None,
) -> Response:
    if "project" not in spec.model_fields_set:
        spec = spec.model_copy(update={"project": principal.project})
    principal.check_can_write(spec.project)
    # A retry is answered from the read session: on SQLite the write session would take the
    # database's one write lock, and a burst of retries would queue up behind it.
    earlier = service.earlier_submit(reader, spec, idempotency_key) if idempotency_key else None
    if earlier is not None:
        job, created = earlier, False
    elif idempotency_key is None:
        job, created = service.submit(session, spec, idempotency_key)
    else:
        with idempotency.claim(session, spec.project, idempotency_key):
            job, created = service.submit(session, spec, idempotency_key)
            # On SQLite the claim is held by this process, not the transaction: it must
            # last until the job is committed, or a concurrent retry would miss both.
            session.commit()
    if created:
        after_commit(session, wake_scheduler)  # the scheduler must find the job committed
    return json_response(
        service.to_out(job),
        status.HTTP_202_ACCEPTED if created else status.HTTP_200_OK,
        {"Location": f"/v1/jobs/{job.id}"},
    )


@router.get("", response_model=JobPage, responses=responses(401, 403, 422), summary="List jobs")
def list_jobs(
    session: SessionDep,
    scope: ListingScope,
    state: Annotated[list[JobState] | None, Query(description="Repeat to match any.")] = None,
    cursor: Annotated[
        str | None,
        Query(pattern=JOB_CURSOR_PATTERN, description="`next_cursor` of the previous page."),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> JobPage:
    return service.page(
        session,
        scope,
        states=state or [],
        cursor=cursor,
        limit=limit,
    )


@router.get(
    "/{job_id}", response_model=JobOut, responses=responses(401, 403, 404), summary="Get a job"
)
@ends_unit_of_work
def get_job(job_id: str, session: SessionDep, principal: CurrentPrincipal) -> Response:
    return json_response(service.detail(session, service.get(session, job_id, principal)))


@router.post(
    "/{job_id}/checkpoints/{step}/export",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobOut,
    operation_id="exportCheckpoint",
    responses=responses(401, 403, 404, 422, 429),
    summary="Export one stored checkpoint of a job as a model",
    description="Queues a job that trains zero steps from the checkpoint (its spec as "
    "submitted, its inputs as the job read them, `init_from` the checkpoint's weights, "
    "`stop.max_steps: 0`): the recipe's loop loads it, evaluates it and exports it as a "
    "finished run's model (a fine-tune: `hf/merged/`, `hf/adapter/`, the manifest). 404 "
    "where the checkpoint is not stored; 422 for a script's checkpoint.",
)
def export_checkpoint(
    job_id: str,
    step: Annotated[int, Path(ge=0, le=MAX_INT)],
    session: SessionDep,
    principal: CurrentPrincipal,
    response: Response,
    asked: CheckpointExport | None = None,
) -> JobOut:
    job = checkpoint_export.export_checkpoint(
        session, job_id, step, asked or CheckpointExport(), principal
    )
    after_commit(session, wake_scheduler)
    response.headers["Location"] = f"/v1/jobs/{job.id}"
    return service.to_out(job)


@router.patch(
    "/{job_id}",
    response_model=JobOut,
    responses=responses(401, 403, 404, 409, 422),
    summary="Change a job's priority",
)
def patch_job(
    job_id: str, patch: JobPatch, session: SessionDep, principal: CurrentPrincipal
) -> JobOut:
    job = service.change_priority(session, job_id, patch.priority, principal)
    after_commit(session, wake_scheduler)
    return service.to_out(job)


@router.post(
    "/{job_id}/cancel",
    response_model=JobOut,
    status_code=status.HTTP_202_ACCEPTED,
    responses=responses(401, 403, 404, 409),
    summary="Cancel a job",
    description="A job not yet placed ends CANCELLED at once; a placed one goes CANCELLING "
    "while its node stops every rank, then CANCELLED. Cancelling twice is harmless.",
)
def cancel_job(job_id: str, session: SessionDep, principal: CurrentPrincipal) -> JobOut:
    return service.to_out(service.cancel(session, job_id, principal))


@router.delete(
    "/{job_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    operation_id="deleteJob",
    responses=responses(401, 403, 404, 409),
    summary="Delete a job that ended, with what it produced",
    description="Its events, metrics, logs, allocations and artifacts go with it; a stored "
    "object goes once no other row names it. A job that has not ended is 409: cancel it first.",
)
def delete_job(
    job_id: str, session: SessionDep, principal: CurrentPrincipal, background: BackgroundTasks
) -> Response:
    sha256s = deletion.delete(session, job_id, principal)
    background.add_task(deletion.drop_unreferenced_objects, sha256s)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get(
    "/{job_id}/events",
    response_model=EventList,
    responses={
        **responses(401, 403, 404, 422, 429),
        **stream_response_doc(
            "JSON list; or, with `Accept: text/event-stream`, a live stream of `state`, "
            "`event`, `progress`, `metrics` and a final `end` event, resumable with "
            "`Last-Event-ID`; an `error` event ends it if the key is revoked. 429 when the "
            "key has as many streams open as it may."
        ),
    },
    summary="State transitions and other events: a list, or a live stream (SSE)",
)
def job_events(
    job_id: str,
    session: SessionDep,
    principal: Annotated[Principal, Depends(stream_principal)],
    after: Annotated[int, Query(ge=0, le=MAX_ID, description="Only events with a larger id.")] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 500,
    accept: Annotated[str | None, Header()] = None,
    last_event_id: Annotated[str | None, Header(max_length=64)] = None,
) -> EventList | StreamingResponse:
    service.get(session, job_id, principal)
    if wants_stream(accept):
        session.close()  # the stream reads with sessions of its own, for as long as it lasts
        return stream_job(job_id, last_event_id, principal)
    events = repository.events(session, job_id, after, limit)
    return EventList(
        items=[EventOut.model_validate(e, from_attributes=True) for e in events],
        next_after=events[-1].id if len(events) == limit else None,
    )


@router.post(
    "/{job_id}/events/token",
    response_model=StreamToken,
    responses=responses(401, 404),
    summary="A short-lived token for this job's event stream",
    description="For clients that cannot send Authorization, like a browser's EventSource: "
    "`GET /v1/jobs/{job_id}/events?token=...` with `Accept: text/event-stream` (what "
    "EventSource sends). Valid for that stream only, for a few minutes (`expires_at`), "
    "while the key that asked for it is not revoked.",
)
def create_events_token(
    job_id: str, session: SessionDep, principal: CurrentPrincipal
) -> StreamToken:
    service.get(session, job_id, principal)
    return stream_tokens.issue(job_id, principal)
