"""A spec's `init_from`, resolved at submit to one listed checkpoint of a job of the same
project (its step, object and files), so every attempt starts from the same bytes; and
refused, with the reason, where that checkpoint cannot start this job."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ampfleet.api.errors import UnprocessableError
from ampfleet.core.artifact_names import platform_made
from ampfleet.core.artifacts import catalog
from ampfleet.core.models import Artifact, Job
from ampfleet.core.spec import InitFrom, JobSpec

FIELD = "init_from"


def resolve_init_from(session: Session, spec: JobSpec) -> dict[str, Any] | None:
    wanted = spec.init_from
    if wanted is None:
        return None
    source = session.get(Job, wanted.job)
    if source is None or source.project != spec.project:
        raise UnprocessableError.for_field(
            f"{FIELD}.job", f"job {wanted.job} not found in project {spec.project}"
        )
    row = _checkpoint(session, source, wanted)
    if not spec.is_script and not platform_made(list(row.details.get("files", []))):
        raise UnprocessableError.for_field(
            f"{FIELD}.job",
            f"the checkpoint of step {row.step} of job {source.id} holds a plain script's own "
            "files, which only a script can read (AMPFLEET_INIT_DIR); a recipe starts from a "
            "checkpoint the platform wrote (a recipe's, or a script's session.save)",
        )
    if wanted.load == "full":
        _check_continuable(spec, source, row)
    return {
        **wanted.model_dump(mode="json"),
        "step": row.step,
        "sha256": row.sha256,
        "artifact": row.id,
        "name": row.name,
    }


def _checkpoint(session: Session, source: Job, wanted: InitFrom) -> Artifact:
    if wanted.checkpoint == "latest":
        row = catalog.latest_checkpoint(session, source.id)
    else:
        row = session.scalar(
            select(Artifact).where(
                Artifact.job_id == source.id,
                Artifact.kind == catalog.CHECKPOINT,
                Artifact.step == wanted.checkpoint,
            )
        )
    if row is not None:
        return row
    steps = session.scalars(
        select(Artifact.step)
        .where(Artifact.job_id == source.id, Artifact.kind == catalog.CHECKPOINT)
        .order_by(Artifact.step)
    ).all()
    if not steps:
        raise UnprocessableError.for_field(
            f"{FIELD}.job",
            f"job {source.id} has no checkpoint listed (a job lists one when it ends, and "
            "every checkpoint.every_steps steps)",
        )
    raise UnprocessableError.for_field(
        f"{FIELD}.checkpoint",
        f"job {source.id} has no checkpoint of step {wanted.checkpoint}; it lists steps "
        + ", ".join(str(step) for step in steps),
    )


def _check_continuable(spec: JobSpec, source: Job, row: Artifact) -> None:
    """Continuing is the same training, further: the same code, and steps left to train."""
    ours, theirs = _what_trains(spec.model_dump(mode="json")), _what_trains(source.resolved)
    if ours != theirs:
        raise UnprocessableError.for_field(
            f"{FIELD}.load",
            f"'full' continues the same training, and job {source.id} ran {theirs}, not "
            f"{ours}; 'weights' starts other training from its weights",
        )
    max_steps, step = spec.stop.max_steps, row.step or 0
    if max_steps is not None and max_steps <= step:
        raise UnprocessableError.for_field(
            "stop.max_steps",
            f"the checkpoint is of step {step} and 'full' continues its step count: give "
            f"stop.max_steps above {step} (the total), not {max_steps}",
        )


def _what_trains(spec: Mapping[str, Any]) -> str:
    """What a spec trains, as stored or as submitted: a recipe, an entrypoint or a command."""
    code = spec.get("code") or {}
    if not code:
        return f"recipe {spec.get('recipe')}"
    if code.get("entrypoint"):
        return f"entrypoint {code['entrypoint']}"
    return "a command (script mode)"
