"""Rules of the jobs resource: admission, idempotent submit, listing, cancel. Flushes, never
commits."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import PurePosixPath
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ampfleet.api.auth import ForbiddenError, Principal, ProjectScope
from ampfleet.api.bundles.service import bundle_files, entrypoint_problem
from ampfleet.api.errors import (
    ConflictError,
    ErrorDetail,
    NotFoundError,
    TooManyRequestsError,
    UnprocessableError,
)
from ampfleet.api.goodput import goodput_out
from ampfleet.api.jobs import eta, idempotency, repository
from ampfleet.api.jobs.init_from import resolve_init_from
from ampfleet.api.jobs.inputs import listed_inputs, resolve_inputs
from ampfleet.api.jobs.node_shapes import recent_node_shapes
from ampfleet.api.jobs.schemas import (
    JobOut,
    JobPage,
    PrecisionSetting,
    Progress,
    QueueInfo,
    Volume,
)
from ampfleet.api.pagination import decode_cursor, encode_cursor
from ampfleet.core import goodput, job_creation, tracing
from ampfleet.core.cancelling import request_cancel
from ampfleet.core.custom_code import custom_code_allowed, custom_code_refusal
from ampfleet.core.lifecycle import record_event
from ampfleet.core.models import Bundle, Job
from ampfleet.core.recipes import ListedInput, UnknownRecipeError
from ampfleet.core.sandbox import bubblewrap_problem
from ampfleet.core.settings import get_settings
from ampfleet.core.spec import (
    CodeSpec,
    JobSpec,
    Precision,
    Priority,
    command_script,
)
from ampfleet.core.states import JobState
from ampfleet.core.validation import describe_invalid, dotted

JOB_ID = re.compile(r"job_[0-9a-z]{26}")


def resolve(spec: JobSpec) -> dict[str, Any]:
    """The spec with every default filled, hyperparameters validated by the recipe
    (core/job_creation.py), refusals in the envelope."""
    try:
        return job_creation.resolve_recipe(spec)
    except UnknownRecipeError as exc:
        raise UnprocessableError.for_field("recipe", str(exc)) from None
    except job_creation.AdmissionRefusedError as refusal:
        message, details = describe_invalid(
            "hyperparameters", refusal.errors, ErrorDetail, _hyperparameter_field
        )
        raise UnprocessableError(message, details) from None


def code_bundle(session: Session, project: str, code: CodeSpec) -> Bundle:
    """The bundle a job's `code` names, in the job's project, where bundled code may run."""
    problem = bubblewrap_problem() if get_settings().sandbox == "bubblewrap" else None
    if problem:
        raise UnprocessableError.for_field(
            "code",
            f"bundled code runs only inside the bubblewrap sandbox, and {problem} here; "
            "install bubblewrap, or the operator may set AMPFLEET_SANDBOX=none to run it "
            "unconfined",
        )
    if not custom_code_allowed(session, project):
        raise ForbiddenError(custom_code_refusal(project))
    bundle = session.get(Bundle, code.bundle)
    if bundle is None or bundle.project != project:
        raise UnprocessableError.for_field(
            "code.bundle", f"bundle {code.bundle} not found in project {project}"
        )
    problem = entrypoint_problem(bundle, code.entrypoint) if code.entrypoint else None
    if problem:
        raise UnprocessableError.for_field("code.entrypoint", problem)
    return bundle


def check_script_in(bundle: Bundle, command: list[str]) -> None:
    """A script the command names by a relative path is a file of the bundle, as its stored
    listing says (nothing is unpacked here)."""
    script = command_script(command)
    if script is None or script.startswith("/"):
        return
    wanted = PurePosixPath(script)
    listed = {PurePosixPath(path) for path in bundle_files(bundle)}
    if wanted not in listed:
        top = sorted({str(path.parts[0]) for path in listed})[:20]
        raise UnprocessableError.for_field(
            "code.command",
            f"the command runs {script}, which bundle {bundle.id} does not have; it runs from "
            f"the bundle's top folder, which holds: {', '.join(top) or 'nothing'}",
        )


def _hyperparameter_field(error: Mapping[str, Any]) -> str:
    return dotted(("hyperparameters", *error["loc"]))


def request_fingerprint(spec: JobSpec) -> str:
    canonical = json.dumps(spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def admit(session: Session, spec: JobSpec, resolved: Mapping[str, Any]) -> None:
    """Refuse what can never run on the fleet as registered (its shape, or its ranks' memory
    on every node that could host it), or what is over its queue quota."""
    try:
        try:
            job_creation.check_fits(session, spec, resolved, recent_node_shapes.get(session))
        except job_creation.AdmissionRefusedError:
            # Refused on a list up to a second old: decide on today's.
            job_creation.check_fits(session, spec, resolved, recent_node_shapes.refresh(session))
        job_creation.check_queue_quota(session, spec.project)
    except job_creation.AdmissionRefusedError as refusal:
        raise http_refusal(refusal) from None


def check_listed_inputs(
    spec: JobSpec, resolved: Mapping[str, Any], listed: Mapping[str, ListedInput]
) -> None:
    """The recipe's check of the resolved inputs (core/job_creation.py), a 422 on its field."""
    try:
        job_creation.check_listed_inputs(spec, resolved, listed)
    except job_creation.AdmissionRefusedError as refusal:
        raise http_refusal(refusal) from None


def http_refusal(
    refusal: job_creation.AdmissionRefusedError,
) -> UnprocessableError | TooManyRequestsError:
    """A core refusal as the envelope says it: 429 for a quota, else 422 on its field."""
    if refusal.kind == "quota":
        return TooManyRequestsError(refusal.message)
    return UnprocessableError.for_field(refusal.field or "spec", refusal.message)


def earlier_submit(session: Session, spec: JobSpec, idempotency_key: str) -> Job | None:
    """The job an earlier request with this key made, if any and the key has not expired
    (422 for another body)."""
    existing = repository.get_by_idempotency_key(session, spec.project, idempotency_key)
    if existing is None or idempotency.expired(existing, get_settings().idempotency_key_ttl_s):
        return None
    return _same_request_or_refuse(existing, request_fingerprint(spec))


def submit(session: Session, spec: JobSpec, idempotency_key: str | None) -> tuple[Job, bool]:
    """Queue a job; returns (job, created). A repeated idempotency key returns the first job
    (the router has looked for it already; a request racing this one is caught below).
    The job's trace is the request's (core/tracing.py): the client's, or one it began."""
    with tracing.tracer.start_as_current_span(
        "ampfleet.submit", attributes={"ampfleet.project": spec.project}
    ) as span:
        job, created = _submit(session, spec, idempotency_key)
        span.set_attributes({"ampfleet.job_id": job.id, "ampfleet.created": created})
        return job, created


def _submit(session: Session, spec: JobSpec, idempotency_key: str | None) -> tuple[Job, bool]:
    fingerprint = request_fingerprint(spec)
    if idempotency_key is not None:
        existing = repository.get_by_idempotency_key(session, spec.project, idempotency_key)
        if existing is not None:
            if not idempotency.expired(existing, get_settings().idempotency_key_ttl_s):
                return _same_request_or_refuse(existing, fingerprint), False
            existing.idempotency_key = None  # expired: the key is free for this request
            session.flush()
    resolved = resolve(spec)
    if spec.code is not None:
        bundle = code_bundle(session, spec.project, spec.code)
        resolved["code"]["sha256"] = bundle.sha256
        if spec.code.command is not None:
            check_script_in(bundle, spec.code.command)
    resolved["inputs"] = resolve_inputs(session, spec.project, spec.inputs)
    check_listed_inputs(spec, resolved, listed_inputs(session, resolved["inputs"]))
    resolved["init_from"] = resolve_init_from(session, spec)
    admit(session, spec, resolved)
    job = job_creation.new_job(
        spec,
        resolved,
        recipe=job_creation.recipe_of(spec),
        idempotency_key=idempotency_key,
        request_hash=fingerprint,
    )
    if idempotency_key is None:
        session.add(job)
        session.flush()
    else:
        try:
            with session.begin_nested():  # a savepoint only where a race is possible
                session.add(job)
                session.flush()
        except IntegrityError:
            # A concurrent request with the same idempotency key won the insert.
            existing = repository.get_by_idempotency_key(session, spec.project, idempotency_key)
            if existing is None:
                raise
            return _same_request_or_refuse(existing, fingerprint), False
    job_creation.record_submitted(session, job, spec)
    return job, True


def _same_request_or_refuse(existing: Job, fingerprint: str) -> Job:
    if existing.request_hash != fingerprint:
        raise UnprocessableError.for_field(
            "Idempotency-Key",
            f"already used for job {existing.id} with a different request body",
        )
    return existing


def get(session: Session, job_id: str, principal: Principal) -> Job:
    job = repository.get(session, job_id)
    if job is None:
        raise NotFoundError(f"job {job_id} not found")
    principal.check_visible(job.project, f"job {job_id}")
    return job


def page(
    session: Session,
    scope: ProjectScope,
    *,
    states: Sequence[JobState],
    cursor: str | None,
    limit: int,
) -> JobPage:
    """Newest first, `limit` at a time; the cursor is the last job id answered."""
    jobs = repository.page(
        session,
        scope,
        states=[s.value for s in states],
        before_id=decode_cursor(cursor, _job_id) if cursor else None,
        limit=limit + 1,
    )
    more = len(jobs) > limit
    return JobPage(
        items=[to_out(job) for job in jobs[:limit]],
        next_cursor=encode_cursor(jobs[limit - 1].id.encode()) if more else None,
    )


def _job_id(payload: bytes) -> str | None:
    job_id = payload.decode("ascii")
    return job_id if JOB_ID.fullmatch(job_id) else None


def change_priority(session: Session, job_id: str, priority: Priority, principal: Principal) -> Job:
    job = get(session, job_id, principal)
    principal.check_can_write(job.project)
    if JobState(job.state).is_terminal():
        raise ConflictError(f"job {job_id} is already {job.state}")
    previous = job.resolved["priority"]
    if previous != priority.value:
        job.priority = priority.rank
        job.resolved = {**job.resolved, "priority": priority.value}
        record_event(session, job, "priority_changed", f"{previous} -> {priority.value}")
        session.flush()
    return job


def cancel(session: Session, job_id: str, principal: Principal) -> Job:
    """Not yet placed: CANCELLED at once. Placed: CANCELLING; its node stops every rank."""
    job = get(session, job_id, principal)
    principal.check_can_write(job.project)
    state = JobState(job.state)
    if state is JobState.CANCELLING:
        return job
    if state.is_terminal():
        raise ConflictError(f"job {job_id} is already {state.value}")
    request_cancel(session, job_id, reason="cancel_requested", message="cancelled by request")
    session.refresh(job)
    if JobState(job.state).is_terminal() and job.state != JobState.CANCELLED:
        raise ConflictError(f"job {job_id} is already {job.state}")
    return job


def progress_of(job: Job, now: datetime) -> Progress:
    """Step, total and the ETA (api/jobs/eta.py): what GET /v1/jobs/{id} and the stream say."""
    total = job.total_steps
    estimate = eta.estimate(job, now)
    return Progress(
        step=job.step,
        total_steps=total,
        fraction=min(job.step / total, 1.0) if total else None,
        eta_seconds=estimate.eta_seconds,
        eta_confidence=estimate.confidence,
        steps_per_s=estimate.steps_per_s,
    )


def queue_info(job: Job) -> QueueInfo | None:
    """Why the job waits, while it is queued."""
    if job.state != JobState.QUEUED:
        return None
    return QueueInfo(
        position=job.queue_position,
        pending_reason=job.pending_reason,
        estimated_start_at=job.estimated_start_at,
        not_before=job.not_before,
    )


def detail(session: Session, job: Job) -> JobOut:
    """A single job as its GET shows it: with its goodput, which listings leave out (it
    reads the job's allocation and accounting rows)."""
    return to_out(job).model_copy(update={"goodput": goodput_out(goodput.of_job(session, job))})


def to_out(job: Job, now: datetime | None = None) -> JobOut:
    now = now or datetime.now(UTC)
    resolved = job.resolved
    return JobOut(
        id=job.id,
        name=job.name,
        project=job.project,
        recipe=job.recipe,
        state=JobState(job.state),
        attempt=job.attempt,
        priority=Priority(resolved["priority"]),
        progress=progress_of(job, now),
        queue=queue_info(job),
        gang_size=job.gang_size,
        latest_metrics=job.latest_metrics or {},
        volume=Volume(
            metric_points=job.metric_points or 0,
            metric_points_dropped=job.metric_points_dropped or 0,
            log_bytes=job.log_bytes or 0,
            log_lines_dropped=job.log_lines_dropped or 0,
            records_rejected=job.records_rejected or 0,
        ),
        precision=PrecisionSetting(
            requested=Precision(resolved["precision"]), effective=job.precision
        ),
        allreduce_dtype=PrecisionSetting(
            requested=Precision(resolved["allreduce_dtype"]), effective=job.allreduce_dtype
        ),
        failure_reason=job.failure_reason,
        labels=resolved.get("labels", {}),
        sweep_id=job.sweep_id,
        trial=job.trial,
        spec=resolved,
        created_at=job.created_at,
        updated_at=job.updated_at,
        scheduled_at=job.scheduled_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
    )
