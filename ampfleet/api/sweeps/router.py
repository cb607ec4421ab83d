"""HTTP of the sweeps resource; rules live in service.py, queries in repository.py."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query, Response, status
from fastapi.responses import StreamingResponse

from ampfleet.api import stream_tokens
from ampfleet.api.auth import CurrentPrincipal, ListingScope, Principal
from ampfleet.api.bounds import MAX_ID
from ampfleet.api.deps import SessionDep
from ampfleet.api.errors import responses
from ampfleet.api.stream_tokens import StreamToken, sweep_stream_principal
from ampfleet.api.streaming import stream_response_doc, wants_stream
from ampfleet.api.sweeps import service
from ampfleet.api.sweeps.schemas import SweepEventList, SweepOut, SweepPage
from ampfleet.api.sweeps.stream import stream_sweep
from ampfleet.core.db import after_commit
from ampfleet.core.messaging import wake_scheduler
from ampfleet.core.sweep_spec import SweepSpec

router = APIRouter(prefix="/v1/sweeps", tags=["sweeps"])

SWEEP_CURSOR_PATTERN = r"^[A-Za-z0-9_-]{40}$"  # a sweep id, base64url without padding


@router.post(
    "",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=SweepOut,
    responses=responses(401, 403, 422, 429),
    summary="Start a sweep: a hyperparameter and precision search whose trials are jobs",
    description="Refused with 422 when its base job, or a trial at any corner of its space, "
    "could never run on the fleet as registered, or when it asks for more concurrent trials "
    "than its project may run; 429 when its project's queue is full. The scheduler then asks "
    "Optuna for trials, up to `budget.max_concurrent` at a time and `budget.max_trials` in "
    "all, each an ordinary job labelled with the sweep and its trial number.",
)
def create_sweep(
    spec: SweepSpec, session: SessionDep, principal: CurrentPrincipal, response: Response
) -> SweepOut:
    if "project" not in spec.model_fields_set:
        spec = spec.model_copy(update={"project": principal.project})
    principal.check_can_write(spec.project)
    sweep = service.create(session, spec)
    after_commit(session, wake_scheduler)  # the controller asks for its first trials
    response.headers["Location"] = f"/v1/sweeps/{sweep.id}"
    return service.detail(session, sweep)


@router.get("", response_model=SweepPage, responses=responses(401, 403, 422), summary="List sweeps")
def list_sweeps(
    session: SessionDep,
    scope: ListingScope,
    cursor: Annotated[
        str | None,
        Query(pattern=SWEEP_CURSOR_PATTERN, description="`next_cursor` of the previous page."),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> SweepPage:
    return service.page(session, scope, cursor=cursor, limit=limit)


@router.get(
    "/{sweep_id}",
    response_model=SweepOut,
    responses=responses(401, 403, 404),
    summary="A sweep: its trials, the best one (or the Pareto front), the precision report",
)
def get_sweep(sweep_id: str, session: SessionDep, principal: CurrentPrincipal) -> SweepOut:
    return service.detail(session, service.get(session, sweep_id, principal))


@router.post(
    "/{sweep_id}/cancel",
    response_model=SweepOut,
    status_code=status.HTTP_202_ACCEPTED,
    responses=responses(401, 403, 404, 409),
    summary="Cancel a sweep and every trial of it not yet ended",
)
def cancel_sweep(sweep_id: str, session: SessionDep, principal: CurrentPrincipal) -> SweepOut:
    sweep = service.cancel(session, sweep_id, principal)
    after_commit(session, wake_scheduler)
    return service.detail(session, sweep)


@router.get(
    "/{sweep_id}/events",
    response_model=SweepEventList,
    responses={
        **responses(401, 403, 404, 422, 429),
        **stream_response_doc(
            "JSON list; or, with `Accept: text/event-stream`, a live stream of `event` (each "
            "sweep event), `progress` (state, reason, trials by state, when they change) and "
            "a final `end`, resumable with `Last-Event-ID`; an `error` event ends it if the "
            "key is revoked. 429 when the key has as many streams open as it may."
        ),
    },
    summary="A sweep's events (trials started, pruned, ended; its end): a list, or a live "
    "stream (SSE)",
)
def sweep_events(
    sweep_id: str,
    session: SessionDep,
    principal: Annotated[Principal, Depends(sweep_stream_principal)],
    after: Annotated[int, Query(ge=0, le=MAX_ID, description="Only events with a larger id.")] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 500,
    accept: Annotated[str | None, Header()] = None,
    last_event_id: Annotated[str | None, Header(max_length=64)] = None,
) -> SweepEventList | StreamingResponse:
    service.get(session, sweep_id, principal)
    if wants_stream(accept):
        session.close()  # the stream reads with sessions of its own, for as long as it lasts
        return stream_sweep(sweep_id, last_event_id, principal)
    return service.events(session, sweep_id, after, limit)


@router.post(
    "/{sweep_id}/events/token",
    response_model=StreamToken,
    responses=responses(401, 403, 404),
    summary="A short-lived token for this sweep's event stream",
    description="For clients that cannot send an Authorization header: open `GET "
    "/v1/sweeps/{sweep_id}/events?token=...` with `Accept: text/event-stream` (what "
    "EventSource sends). Valid for that stream only, for a few minutes (`expires_at`), "
    "and only while the key that asked for it is valid.",
)
def create_sweep_events_token(
    sweep_id: str, session: SessionDep, principal: CurrentPrincipal
) -> StreamToken:
    service.get(session, sweep_id, principal)
    return stream_tokens.issue(sweep_id, principal)
