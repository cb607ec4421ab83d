"""Every API operation, once, as a flow (see protocol.py): `Client` and `AsyncClient` run
these and add nothing but the I/O."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
import yaml
from pydantic import TypeAdapter, ValidationError

from ampfleet.core.roles import Role
from ampfleet.core.spec import JobSpec, Priority
from ampfleet.core.states import JobState
from ampfleet.core.validation import describe_invalid, dotted
from ampfleet.sdk.errors import (
    ErrorDetail,
    RateLimited,
    SpecError,
    WaitTimeout,
    error_from_response,
)
from ampfleet.sdk.models import (
    Bundle,
    ConsoleLogin,
    CreatedKey,
    Dataset,
    Diagnosis,
    Event,
    EventPage,
    Job,
    JobFrame,
    JobMetrics,
    JobPage,
    Key,
    LogLine,
    LogPage,
    Node,
)
from ampfleet.sdk.protocol import Flow, Item, IterFlow, Query, Request, Sleep, query
from ampfleet.sdk.streams import SSE_MEDIA_TYPE, JobFrames, log_lines, resumable_stream
from ampfleet.sdk.uploads import (
    list_of,
    spec_with_code,
    spec_with_command,
    upload_bundle,
    upload_dataset,
)

SpecInput = JobSpec | Mapping[str, Any] | str | os.PathLike[str]
CodeSource = str | os.PathLike[str]
"""A folder to pack, an archive file, or the id of a bundle uploaded before."""
InputSource = str | os.PathLike[str]
"""A folder or file to upload as a dataset, or `name@version` / `file:///...` as it is."""
T = TypeVar("T")
PLACEHOLDER_BUNDLE = "bnd_" + "0" * 26


def check_before_upload(spec: Mapping[str, Any], with_code: bool) -> JobSpec:
    """The spec as it will be once its bundle is uploaded (a placeholder id in `code.bundle`):
    a spec that cannot be valid fails before anything is packed or sent."""
    return load_spec(spec_with_code(spec, PLACEHOLDER_BUNDLE if with_code else None, {}))


States = JobState | str | Iterable[JobState | str] | None
EVENTS_PAGE = 1000
LOGS_PAGE = 1000
_nodes = TypeAdapter(list[Node])
_keys = TypeAdapter(list[Key])


def spec_mapping(spec: SpecInput) -> Mapping[str, Any]:
    """The spec as given: a JobSpec's set fields, a mapping, or a YAML (or JSON) file's."""
    if isinstance(spec, JobSpec):
        return spec.model_dump(mode="json", exclude_unset=True)
    if isinstance(spec, str | os.PathLike):
        path = Path(spec)
        try:
            loaded = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise SpecError(
                422, "invalid_spec", f"cannot read the job spec {path}: {exc}"
            ) from None
        if not isinstance(loaded, Mapping):
            raise SpecError(422, "invalid_spec", f"{path} does not hold a mapping (a job spec)")
        return loaded
    return spec


def load_spec(spec: SpecInput) -> JobSpec:
    """A JobSpec from a JobSpec, a mapping, or the path of a YAML (or JSON) file; a spec that
    cannot be valid raises SpecError with the offending fields, before any request."""
    if isinstance(spec, JobSpec):
        return spec
    try:
        return JobSpec.model_validate(spec_mapping(spec))
    except ValidationError as exc:
        message, details = describe_invalid("job spec", exc.errors(), ErrorDetail, _spec_field)
        raise SpecError(422, "validation_error", message, details) from None


def _spec_field(error: Mapping[str, Any]) -> str:
    return dotted(error["loc"]) or "spec"  # a model-level error has no field of its own


def _states(state: States) -> list[str]:
    if state is None:
        return []
    if isinstance(state, str):  # JobState is a str too
        return [JobState(state).value]
    return [JobState(s).value for s in state]


def _job(job_id: str, suffix: str = "") -> str:
    return f"/v1/jobs/{quote(job_id, safe='')}{suffix}"


def poll_until(
    read: Callable[[], Flow[T]],
    over: Callable[[T], bool],
    timed_out: Callable[[T, float], Exception],
    *,
    timeout: float | None,
    poll: float,
    max_poll: float,
    on_poll: Callable[[T], None] | None = None,
) -> Flow[T]:
    """Reads until `over` says so, the pause growing 1.5x from `poll` to `max_poll`; past
    `timeout` seconds raises `timed_out(last read, timeout)`."""
    deadline = None if timeout is None else time.monotonic() + timeout
    pause = poll
    while True:
        value = yield from read()
        if on_poll is not None:
            on_poll(value)
        if over(value):
            return value
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise timed_out(value, timeout or 0.0)
        yield Sleep(pause if left is None else min(pause, left))
        pause = min(pause * 1.5, max_poll)


class Operations:
    def __init__(self, *, max_retries: int, max_retry_after: float, max_reconnects: int) -> None:
        self.max_retries = max_retries
        self.max_retry_after = max_retry_after
        self.max_reconnects = max_reconnects

    def send(self, request: Request) -> Flow[httpx.Response]:
        """One request; 429 is retried `max_retries` times, after the Retry-After it names
        (when that is at most `max_retry_after`); an error status raises its ApiError."""
        retries = 0
        while True:
            response: httpx.Response = yield request
            if response.is_success:
                return response
            error = error_from_response(response)
            if not isinstance(error, RateLimited) or retries >= self.max_retries:
                raise error
            wait = 2.0**retries if error.retry_after is None else error.retry_after
            if wait > self.max_retry_after:
                raise error
            retries += 1
            yield Sleep(wait)

    # -- jobs ---------------------------------------------------------------------------------

    def submit(
        self,
        spec: SpecInput | None,
        idempotency_key: str | None,
        code: CodeSource | None = None,
        inputs: Mapping[str, InputSource] | None = None,
        on_progress: Callable[[str, int], None] | None = None,
        command: Sequence[str] | None = None,
    ) -> Flow[Job]:
        if command is not None:
            spec = spec_with_command({} if spec is None else spec_mapping(spec), command)
        if spec is None:
            raise SpecError(422, "invalid_spec", "give a job spec, or a command to run")
        if code is not None or inputs:
            spec = yield from self._brought(spec_mapping(spec), code, inputs or {}, on_progress)
        body = load_spec(spec).model_dump(mode="json", exclude_unset=True)
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        response = yield from self.send(Request("POST", "/v1/jobs", json=body, headers=headers))
        return Job.model_validate_json(response.content)

    def _brought(
        self,
        spec: Mapping[str, Any],
        code: CodeSource | None,
        inputs: Mapping[str, InputSource],
        on_progress: Callable[[str, int], None] | None,
    ) -> Flow[dict[str, Any]]:
        """The spec naming the bundle and datasets it brings, uploaded first (a folder is
        packed; a `bnd_...` id or a `name@version` reference is taken as it is). The spec is
        checked before anything is uploaded."""
        check_before_upload(spec, code is not None)
        project = spec.get("project")

        def progress(what: str) -> Callable[[int], None] | None:
            return None if on_progress is None else lambda sent: on_progress(what, sent)

        bundle_id = None
        if isinstance(code, str) and code.startswith("bnd_"):
            bundle_id = code
        elif code is not None:
            source = Path(code)
            bundle = yield from upload_bundle(self.send, source, project, progress(str(source)))
            bundle_id = bundle.id
        refs = {}
        for name, item in inputs.items():
            if isinstance(item, str) and not Path(item).exists():
                refs[name] = item  # a dataset reference, or a file:/// path on the nodes
                continue
            dataset = yield from upload_dataset(
                self.send, name, Path(item), project, None, progress(str(item))
            )
            refs[name] = dataset.ref
        return spec_with_code(spec, bundle_id, refs)

    def upload_bundle(
        self, source: Path, project: str | None, on_progress: Callable[[int], None] | None
    ) -> Flow[Bundle]:
        return (yield from upload_bundle(self.send, source, project, on_progress))

    def upload_dataset(
        self,
        name: str,
        source: Path,
        project: str | None,
        filename: str | None,
        on_progress: Callable[[int], None] | None,
    ) -> Flow[Dataset]:
        return (yield from upload_dataset(self.send, name, source, project, filename, on_progress))

    def bundles(self, project: str | None) -> Flow[list[Bundle]]:
        return (yield from list_of(self.send, "/v1/bundles", Bundle, project=project))

    def datasets(self, name: str | None, project: str | None) -> Flow[list[Dataset]]:
        return (yield from list_of(self.send, "/v1/datasets", Dataset, name=name, project=project))

    def get(self, job_id: str) -> Flow[Job]:
        response = yield from self.send(Request("GET", _job(job_id)))
        return Job.model_validate_json(response.content)

    def jobs_page(
        self, state: States, project: str | None, cursor: str | None, limit: int
    ) -> Flow[JobPage]:
        params = query(state=_states(state), project=project, cursor=cursor, limit=limit)
        response = yield from self.send(Request("GET", "/v1/jobs", params))
        return JobPage.model_validate_json(response.content)

    def list_jobs(
        self, state: States, project: str | None, limit: int | None, page_size: int
    ) -> IterFlow[Job]:
        cursor, left = None, limit
        while left is None or left > 0:
            size = page_size if left is None else min(page_size, left)
            page = yield from self.jobs_page(state, project, cursor, size)
            for job in page.items:
                yield Item(job)
            left = None if left is None else left - len(page.items)
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def cancel(self, job_id: str) -> Flow[Job]:
        response = yield from self.send(Request("POST", _job(job_id, "/cancel")))
        return Job.model_validate_json(response.content)

    def export_checkpoint(self, job_id: str, step: int, dtype: str | None) -> Flow[Job]:
        body = {"dtype": dtype} if dtype is not None else {}
        path = _job(job_id, f"/checkpoints/{int(step)}/export")
        response = yield from self.send(Request("POST", path, json=body))
        return Job.model_validate_json(response.content)

    def delete(self, job_id: str) -> Flow[None]:
        yield from self.send(Request("DELETE", _job(job_id)))

    def set_priority(self, job_id: str, priority: Priority | str) -> Flow[Job]:
        body = {"priority": Priority(priority).value}
        response = yield from self.send(Request("PATCH", _job(job_id), json=body))
        return Job.model_validate_json(response.content)

    def wait(self, job_id: str, timeout: float | None, poll: float, max_poll: float) -> Flow[Job]:
        """Polls until the job is terminal, the pause growing 1.5x from `poll` to `max_poll`."""
        return (
            yield from poll_until(
                lambda: self.get(job_id),
                lambda job: job.is_terminal,
                WaitTimeout,
                timeout=timeout,
                poll=poll,
                max_poll=max_poll,
            )
        )

    # -- what a job reports -------------------------------------------------------------------

    def events(self, job_id: str, after: int) -> Flow[list[Event]]:
        events: list[Event] = []
        while True:
            params = query(after=after, limit=EVENTS_PAGE)
            response = yield from self.send(Request("GET", _job(job_id, "/events"), params))
            page = EventPage.model_validate_json(response.content)
            events += page.items
            if page.next_after is None:
                return events
            after = page.next_after

    def opener(self, path: str, params: Query) -> Callable[[str | None], Flow[httpx.Response]]:
        """Opens (and reopens, from an event id) the event stream at `path`."""

        def open_stream(last_event_id: str | None) -> Flow[httpx.Response]:
            headers = {"Accept": SSE_MEDIA_TYPE}
            if last_event_id:
                headers["Last-Event-ID"] = last_event_id
            return self.send(Request("GET", path, params, headers=headers, stream=True))

        return open_stream

    def stream_events(self, job_id: str, last_event_id: str | None) -> IterFlow[JobFrame]:
        opener = self.opener(_job(job_id, "/events"), ())
        return resumable_stream(opener, JobFrames(), last_event_id, self.max_reconnects)

    def metrics(
        self, job_id: str, names: str | Iterable[str] | None, max_points: int | None
    ) -> Flow[JobMetrics]:
        wanted = names if isinstance(names, str) or names is None else ",".join(names)
        params = query(names=wanted, max_points=max_points)
        response = yield from self.send(Request("GET", _job(job_id, "/metrics"), params))
        return JobMetrics.model_validate_json(response.content)

    def diagnosis(self, job_id: str) -> Flow[Diagnosis]:
        response = yield from self.send(Request("GET", _job(job_id, "/diagnosis")))
        return Diagnosis.model_validate_json(response.content)

    def logs(
        self, job_id: str, rank: int | None, tail: int | None, follow: bool
    ) -> IterFlow[LogLine]:
        path = _job(job_id, "/logs")
        if follow:
            opener = self.opener(path, query(rank=rank, tail=tail))
            yield from resumable_stream(opener, log_lines, None, self.max_reconnects)
            return
        after = None
        while True:
            # `tail` picks where the first page starts; later pages go on from `after`.
            start = query(tail=tail) if after is None else query(after=after)
            params = query(rank=rank, limit=LOGS_PAGE) + start
            response = yield from self.send(Request("GET", path, params))
            page = LogPage.model_validate_json(response.content)
            for line in page.items:
                yield Item(line)
            if page.next_after is None:
                return
            after = page.next_after

    # -- the fleet and its keys -----------------------------------------------------------------

    def nodes(self) -> Flow[list[Node]]:
        response = yield from self.send(Request("GET", "/v1/nodes"))
        return _nodes.validate_python(response.json()["items"])

    def create_key(self, role: Role | str, name: str, project: str | None) -> Flow[CreatedKey]:
        body = {"role": Role(role).value, "name": name, **({"project": project} if project else {})}
        response = yield from self.send(Request("POST", "/v1/keys", json=body))
        return CreatedKey.model_validate_json(response.content)

    def list_keys(self, project: str | None) -> Flow[list[Key]]:
        response = yield from self.send(Request("GET", "/v1/keys", query(project=project)))
        return _keys.validate_python(response.json()["items"])

    def revoke_key(self, key_id: str) -> Flow[None]:
        yield from self.send(Request("DELETE", f"/v1/keys/{quote(key_id, safe='')}"))

    def console_login(self, base_url: str) -> Flow[ConsoleLogin]:
        response = yield from self.send(Request("POST", "/v1/console-tokens"))
        answer = response.json()
        return ConsoleLogin(
            token=answer["token"],
            expires_at=answer["expires_at"],
            expires_in_s=answer["expires_in_s"],
            url=base_url.rstrip("/") + answer["login_path"],
        )
