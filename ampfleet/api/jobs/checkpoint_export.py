"""Exporting one stored checkpoint of a job as a model: a job of its own that trains zero
steps from it (`init_from` the checkpoint's weights, `stop.max_steps: 0`), so the recipe's
own loop loads it, evaluates it and exports it as it exports a finished run (for a
fine-tune: `hf/merged/`, the adapter, the manifest with its lineage). It runs where any job
runs, under the same admission and queue; nothing here imports torch.

The export job is the source job's spec as submitted, with its inputs pinned to what the
source read (each dataset at the version it resolved to), not to what a bare name means now.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from ampfleet.api.artifacts.service import checkpoint_at
from ampfleet.api.auth import Principal
from ampfleet.api.errors import UnprocessableError
from ampfleet.api.jobs import service
from ampfleet.api.jobs.inputs import input_ref
from ampfleet.api.jobs.schemas import CheckpointExport
from ampfleet.core.models import Job
from ampfleet.core.spec import JobSpec

NAME_LIMIT = 128


def export_checkpoint(
    session: Session, job_id: str, step: int, asked: CheckpointExport, principal: Principal
) -> Job:
    """The job that exports the checkpoint of `step` of job `job_id`, queued."""
    source = service.get(session, job_id, principal)
    principal.check_can_write(source.project)
    checkpoint_at(session, job_id, step, principal)  # 404 where it is not stored
    if (source.spec.get("code") or {}).get("command") is not None:
        raise UnprocessableError.for_field(
            "job",
            f"job {job_id} is a script (code.command): its checkpoints are its own files, "
            "which only the script reads; export them with the script itself",
        )
    spec = export_spec(source, step, asked)
    job, _ = service.submit(session, spec, idempotency_key=None)
    return job


def export_spec(source: Job, step: int, asked: CheckpointExport) -> JobSpec:
    submitted: dict[str, Any] = dict(source.spec)
    inputs = source.resolved.get("inputs") or {}
    export = dict(submitted.get("export") or {})
    if asked.dtype is not None:
        export["dtype"] = asked.dtype
    name = f"{source.name or source.id}-step-{step}"[-NAME_LIMIT:].lstrip("._-")
    submitted |= {
        "name": name,
        "project": source.project,
        "inputs": {item: input_ref(resolved) for item, resolved in inputs.items()},
        "init_from": {"job": source.id, "checkpoint": step, "load": "weights"},
        "stop": {"max_steps": 0},
        "export": export,
        "labels": {**(submitted.get("labels") or {}), "exported-from": f"{source.id}-{step}"},
    }
    try:
        return JobSpec.model_validate(submitted)
    except ValidationError as exc:  # a spec stored under older rules than today's
        raise UnprocessableError.for_field(
            "job", f"job {source.id}'s spec no longer validates: {exc.errors()[0]['msg']}"
        ) from None
