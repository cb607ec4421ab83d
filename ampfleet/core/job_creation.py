"""Making a job row: the admission rules every job passes (a submit over POST /v1/jobs and a
sweep's trial alike), written once. The API resolves what only it may read (bundles, inputs,
`init_from`) first; the sweep controller reuses the resolution its sweep was accepted with.
Flushes, never commits."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import ValidationError
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ampfleet.core import tracing
from ampfleet.core.fleet import NodeView, fits_fleet, job_request_of, matches, node_view
from ampfleet.core.ids import new_id
from ampfleet.core.lifecycle import Transition, record_transitions
from ampfleet.core.memory import job_rank_memory, memory_refusal
from ampfleet.core.models import Job, Node, Project, utcnow
from ampfleet.core.recipes import InputError, ListedInput, get_recipe
from ampfleet.core.spec import JobSpec, describe_command
from ampfleet.core.states import JobState


class AdmissionRefusedError(Exception):
    """Why a job may not be made: `unprocessable` can never run as asked (422 over HTTP),
    `quota` may once the project's queue drains (429)."""

    def __init__(
        self,
        message: str,
        *,
        kind: Literal["unprocessable", "quota"] = "unprocessable",
        field: str | None = None,
        errors: list[Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message, self.kind, self.field = message, kind, field
        self.errors = errors or []
        """pydantic's errors, where the refusal is the recipe's hyperparameter schema's."""


def resolve_recipe(spec: JobSpec) -> dict[str, Any]:
    """The spec with every default filled, hyperparameters validated by the recipe (a
    bundled recipe's on the worker: the API never imports bundle code). Raises
    AdmissionRefusedError; an unknown recipe UnknownRecipeError, for callers to report."""
    if spec.recipe is None:
        return spec.model_dump(mode="json")
    recipe = get_recipe(spec.recipe)
    try:
        hyperparameters = recipe.hyperparameters.model_validate(spec.hyperparameters)
    except ValidationError as exc:
        raise AdmissionRefusedError(
            "hyperparameters", field="hyperparameters", errors=exc.errors()
        ) from None
    resolved = spec.model_dump(mode="json")
    resolved["hyperparameters"] = hyperparameters.model_dump(mode="json")
    return resolved


def bundle_recipe(bundle_id: str) -> str:
    """What a job that runs a bundle stores as its recipe: how its jobs are found."""
    return f"bundle:{bundle_id}"


def recipe_of(spec: JobSpec) -> str:
    return spec.recipe or bundle_recipe(spec.code.bundle if spec.code else "")


def check_listed_inputs(
    spec: JobSpec, resolved: Mapping[str, Any], listed: Mapping[str, ListedInput]
) -> None:
    """A registered recipe's check of the resolved inputs by what the API knows of them
    (api/jobs/inputs.py: their stored file lists, what their uploads read), refused on
    `inputs.<name>`; a bundled recipe's checks run on the node only."""
    if spec.recipe is None:
        return
    recipe = get_recipe(spec.recipe)
    hyperparameters = recipe.hyperparameters.model_validate(resolved["hyperparameters"])
    try:
        recipe.check_listed_inputs(hyperparameters, listed)
    except InputError as exc:
        raise AdmissionRefusedError(exc.message, field=f"inputs.{exc.name}") from None


def listed_to_json(listed: Mapping[str, ListedInput]) -> dict[str, Any]:
    """As a sweep keeps them, read once at its submit for every trial's check."""
    return {
        name: {
            "files": None if item.files is None else list(item.files),
            "summary": None if item.summary is None else dict(item.summary),
        }
        for name, item in listed.items()
    }


def listed_from_json(raw: Mapping[str, Any]) -> dict[str, ListedInput]:
    return {name: ListedInput(item["files"], item["summary"]) for name, item in raw.items()}


def node_shapes(session: Session) -> list[NodeView]:
    """What admission needs of every registered node: its columns, not ORM objects (a
    fleet of a thousand nodes is read on every submit)."""
    columns = (Node.id, Node.accelerator, Node.gpu_model, Node.gpu_memory_mb, Node.labels)
    rows = session.execute(
        select(*columns, Node.memory_mb, Node.slots, Node.state, Node.last_heartbeat_at)
    )
    return [node_view(row) for row in rows]


def count_queued(session: Session, project: str) -> int:
    return (
        session.scalar(
            select(func.count()).where(Job.project == project, Job.state == JobState.QUEUED)
        )
        or 0
    )


def check_fits(
    session: Session,
    spec: JobSpec,
    resolved: Mapping[str, Any],
    nodes: list[NodeView] | None = None,
) -> None:
    """Refuse what can never run on the fleet as registered: its shape, or its ranks'
    memory on every node that could host it."""
    request = job_request_of(spec)
    nodes = node_shapes(session) if nodes is None else nodes
    refusal = fits_fleet(request, nodes)
    if refusal:
        raise AdmissionRefusedError(refusal, field="resources")
    if spec.recipe is not None:  # a bundled model's size is known only on the worker
        need = job_rank_memory(resolved)
        refusal = memory_refusal(need, (node for node in nodes if matches(request, node)))
        if refusal:
            raise AdmissionRefusedError(refusal, field="hyperparameters")


def check_queue_quota(session: Session, project_name: str) -> None:
    """Refuse a job over its project's queue quota."""
    project = session.get(Project, project_name)
    if project is not None and project.max_queued_jobs is not None:
        # Count and insert under the project's row lock, held until the submit commits:
        # otherwise concurrent submits all count the same jobs and all get in. (SQLite's
        # writers are serialised already; there this is a no-op.)
        project = session.get(Project, project_name, with_for_update=True, populate_existing=True)
    if project is not None and project.max_queued_jobs is not None:
        queued = count_queued(session, project_name)
        if queued >= project.max_queued_jobs:
            raise AdmissionRefusedError(
                f"project {project_name} has {queued} queued jobs, its limit is "
                f"{project.max_queued_jobs}; retry when some have started",
                kind="quota",
            )


def admit(session: Session, spec: JobSpec, resolved: Mapping[str, Any]) -> None:
    check_fits(session, spec, resolved)
    check_queue_quota(session, spec.project)


def what_runs(spec: JobSpec) -> str:
    if spec.code is None:
        return str(spec.recipe)
    if spec.code.command is not None:
        return describe_command(spec.code.command, limit=120)
    return str(spec.code.entrypoint)


def new_job(
    spec: JobSpec,
    resolved: dict[str, Any],
    *,
    recipe: str,
    idempotency_key: str | None,
    request_hash: str | None,
    sweep_id: str | None = None,
    trial: int | None = None,
) -> Job:
    """The QUEUED row of an admitted job (not added to the session)."""
    return Job(
        id=new_id("job"),
        project=spec.project,
        name=spec.name,
        recipe=recipe,
        spec=spec.model_dump(mode="json", exclude_unset=True),
        resolved=resolved,
        idempotency_key=idempotency_key,
        request_hash=request_hash,
        trace_context=tracing.current_context(),
        state=JobState.QUEUED.value,
        priority=spec.priority.rank,
        attempt=0,
        gang_size=spec.resources.gang_size,
        step=0,
        total_steps=spec.stop.max_steps,  # a script without one: its own, once read
        latest_metrics={},
        sweep_id=sweep_id,
        trial=trial,
    )


def record_submitted(session: Session, job: Job, spec: JobSpec, message: str = "") -> None:
    """The job's first event, QUEUED, saying what runs on what shape."""
    shape = (
        f"{spec.resources.procs} ranks"
        if spec.resources.procs
        else f"{spec.resources.nodes}x{spec.resources.procs_per_node}"
    )
    record_transitions(
        session,
        [
            Transition(
                job_id=job.id,
                project=job.project,
                attempt=0,
                from_state=None,
                to_state=JobState.QUEUED,
                reason="submitted",
                message=message or f"{what_runs(spec)} on {shape}",
            )
        ],
        at=utcnow(),
    )
    session.flush()
