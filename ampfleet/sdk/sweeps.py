"""Sweeps from Python: the flows behind `Client.sweep`, `get_sweep`, `sweeps`, `cancel_sweep`,
`wait_sweep`, `sweep_events` and `stream_sweep_events` (and AsyncClient's, the same flows:
they do no I/O themselves). A sweep answers as the API's JSON (a dict): its trials, the best
one or the Pareto front, and the precision report; an event or a stream's frame likewise.
The spec is checked here first with the same model the server uses (core/sweep_spec.py), so
a bad one fails before any request."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any

import httpx
from pydantic import ValidationError

from ampfleet.core.sweep_spec import SweepSpec
from ampfleet.core.validation import describe_invalid, dotted
from ampfleet.sdk.errors import ClientError, ErrorDetail, SpecError
from ampfleet.sdk.flows import poll_until, spec_mapping
from ampfleet.sdk.protocol import Flow, IterFlow, Request, query
from ampfleet.sdk.streams import ServerSentEvent, resumable_stream

Send = Callable[[Request], Flow[Any]]
Opener = Callable[[str | None], Flow[httpx.Response]]
FRAME_KINDS = frozenset({"event", "progress", "end"})
EVENTS_PAGE = 1000
SweepInput = SweepSpec | Mapping[str, Any] | str | os.PathLike[str]


class SweepWaitTimeoutError(ClientError, TimeoutError):
    """`wait_sweep` gave up; `sweep` is how it was last seen."""

    def __init__(self, sweep: dict[str, Any], timeout: float) -> None:
        super().__init__(f"sweep {sweep['id']} is still {sweep['state']} after {timeout:g}s")
        self.sweep, self.timeout = sweep, timeout


def load_sweep(spec: SweepInput) -> dict[str, Any]:
    if isinstance(spec, SweepSpec):
        return spec.model_dump(mode="json", exclude_unset=True)
    raw = dict(spec_mapping(spec))
    try:
        SweepSpec.model_validate(raw)
    except ValidationError as exc:
        message, details = describe_invalid("sweep spec", exc.errors(), ErrorDetail, _field)
        raise SpecError(422, "validation_error", message, details) from None
    return raw


def _field(error: Mapping[str, Any]) -> str:
    return dotted(error["loc"]) or "spec"


def create(send: Send, spec: SweepInput) -> Flow[dict[str, Any]]:
    response = yield from send(Request("POST", "/v1/sweeps", json=load_sweep(spec)))
    return dict(response.json())


def get(send: Send, sweep_id: str) -> Flow[dict[str, Any]]:
    response = yield from send(Request("GET", f"/v1/sweeps/{sweep_id}"))
    return dict(response.json())


def cancel(send: Send, sweep_id: str) -> Flow[dict[str, Any]]:
    response = yield from send(Request("POST", f"/v1/sweeps/{sweep_id}/cancel"))
    return dict(response.json())


def listing(send: Send, project: str | None) -> Flow[list[dict[str, Any]]]:
    items: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        params = query(project=project, cursor=cursor, limit=200)
        response = yield from send(Request("GET", "/v1/sweeps", params))
        page = response.json()
        items += page["items"]
        cursor = page["next_cursor"]
        if cursor is None:
            return items


def wait(
    send: Send,
    sweep_id: str,
    timeout: float | None,
    poll: float,
    on_poll: Callable[[dict[str, Any]], None] | None,
) -> Flow[dict[str, Any]]:
    return (
        yield from poll_until(
            lambda: get(send, sweep_id),
            lambda sweep: sweep["state"] != "RUNNING",
            SweepWaitTimeoutError,
            timeout=timeout,
            poll=poll,
            max_poll=max(poll, 5.0),
            on_poll=on_poll,
        )
    )


def events(send: Send, sweep_id: str, after: int) -> Flow[list[dict[str, Any]]]:
    """Every event with an id above `after`, oldest first, page after page."""
    items: list[dict[str, Any]] = []
    while True:
        params = query(after=after, limit=EVENTS_PAGE)
        response = yield from send(Request("GET", f"/v1/sweeps/{sweep_id}/events", params))
        page = response.json()
        items += page["items"]
        if page["next_after"] is None:
            return items
        after = page["next_after"]


def events_path(sweep_id: str) -> str:
    return f"/v1/sweeps/{sweep_id}/events"


def stream_events(
    opener: Opener, last_event_id: str | None, max_reconnects: int
) -> IterFlow[dict[str, Any]]:
    """Frames `{"kind": "event" | "progress" | "end", "id", "data"}` until the sweep's
    stream ends, resumed from the last frame's id across dropped connections."""
    return resumable_stream(opener, _frames, last_event_id, max_reconnects)


def _frames(event: ServerSentEvent) -> list[dict[str, Any]]:
    if event.event not in FRAME_KINDS:
        return []  # a kind this SDK does not know yet
    return [{"kind": event.event, "id": event.id, "data": json.loads(event.data)}]
