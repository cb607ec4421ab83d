"""A spec's `inputs`, resolved at submit: each dataset reference to the version it names (a
bare name to its newest version now, so a restart reads the same bytes), each `file:///`
path checked against the operator's AMPFLEET_DATA_ROOTS. Nodes check shared paths again.
The recipe's own check of what it can tell from the datasets' stored file lists (a model
folder without weights, a data file of the wrong format) is core's (job_creation.py), for a
sweep's trials as for a submit."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from ampfleet.api.datasets import repository
from ampfleet.api.errors import UnprocessableError
from ampfleet.core.data_roots import under_roots
from ampfleet.core.settings import get_settings

SHARED = "file://"


def resolve_inputs(session: Session, project: str, inputs: Mapping[str, str]) -> dict[str, Any]:
    return {name: _resolve(session, project, name, ref) for name, ref in inputs.items()}


def _resolve(session: Session, project: str, name: str, ref: str) -> dict[str, Any]:
    field = f"inputs.{name}"
    if ref.startswith(SHARED):
        path = Path(ref.removeprefix(SHARED))
        roots = get_settings().data_roots
        if ".." in path.parts or not under_roots(path, roots):
            allowed = ", ".join(map(str, roots)) or "none: AMPFLEET_DATA_ROOTS is not set"
            raise UnprocessableError.for_field(
                field, f"{path} is not under a folder the operator allows ({allowed})"
            )
        return {"path": str(path)}
    dataset_name, _, version = ref.partition("@")
    row = repository.named(session, project, dataset_name, int(version) if version else None)
    if row is None:
        which = f"version {version} of dataset {dataset_name}" if version else dataset_name
        raise UnprocessableError.for_field(
            field, f"{which} not found in project {project} (POST /v1/datasets uploads one)"
        )
    return {
        "dataset": row.id,
        "name": row.name,
        "version": row.version,
        "sha256": row.sha256,
        "filename": row.filename,
    }
