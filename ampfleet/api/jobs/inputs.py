"""A spec's `inputs`, resolved at submit: each dataset reference to the version it names (a
bare name to its newest version now, so a restart reads the same bytes), each `file:///`
path checked against the operator's AMPFLEET_DATA_ROOTS (nodes check shared paths again),
each `job:<id>` to the files of the Hugging Face model that SUCCEEDED job exported
(`hf/merged/`: each file's object, and the digest of the listing that names the folder on a
node). Then what the recipe's own check sees of them (`listed_inputs`): the stored file lists
and what the uploads read (so it can refuse a model folder without weights or of an
architecture it does not train, a data file of the wrong format or a line without its field)
before anything is queued; the check itself is core's, for a submit and a sweep's trials."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from ampfleet.api.artifacts import repository as artifacts
from ampfleet.api.artifacts.objects import read_head
from ampfleet.api.datasets import repository
from ampfleet.api.errors import UnprocessableError
from ampfleet.core.artifact_names import HF_PREFIX
from ampfleet.core.data_roots import under_roots
from ampfleet.core.dataset_summary import CONFIG, MAX_CONFIG_BYTES, config_summary
from ampfleet.core.models import Dataset, Job
from ampfleet.core.recipes import ListedInput
from ampfleet.core.settings import get_settings
from ampfleet.core.states import JobState

SHARED = "file://"
JOB = "job:"
MODEL_FOLDER = HF_PREFIX + "merged/"


def resolve_inputs(session: Session, project: str, inputs: Mapping[str, str]) -> dict[str, Any]:
    return {name: _resolve(session, project, name, ref) for name, ref in inputs.items()}


def _resolve(session: Session, project: str, name: str, ref: str) -> dict[str, Any]:
    field = f"inputs.{name}"
    if ref.startswith(JOB):
        return _job_model(session, project, field, ref.removeprefix(JOB))
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


def _job_model(session: Session, project: str, field: str, job_id: str) -> dict[str, Any]:
    source = session.get(Job, job_id)
    if source is None or source.project != project:
        raise UnprocessableError.for_field(field, f"job {job_id} not found in project {project}")
    if source.state != JobState.SUCCEEDED:
        raise UnprocessableError.for_field(
            field, f"job {job_id} is {source.state}: its model is there once it SUCCEEDED"
        )
    rows = artifacts.named_under(session, job_id, MODEL_FOLDER)
    if not rows:
        raise UnprocessableError.for_field(
            field,
            f"job {job_id} exported no Hugging Face model ({MODEL_FOLDER}): the fine-tuning "
            "recipes export one",
        )
    files = [
        {"path": row.name.removeprefix(MODEL_FOLDER), "sha256": row.sha256, "size": row.size}
        for row in rows
    ]
    listing = "".join(f"{f['path']}\0{f['sha256']}\n" for f in files)
    return {
        "job": job_id,
        "name": source.name or job_id,
        "sha256": hashlib.sha256(listing.encode()).hexdigest(),  # names the folder on nodes
        "files": files,
    }


def input_ref(item: Mapping[str, Any]) -> str:
    """The reference that resolves to the resolved input `item` again: a dataset at the
    version it named, a shared folder by its path, an earlier job's model by the job."""
    if "path" in item:
        return SHARED + str(item["path"])
    if "job" in item:
        return JOB + str(item["job"])
    return f"{item['name']}@{item['version']}"


def listed_inputs(
    session: Session, resolved: Mapping[str, Mapping[str, Any]]
) -> dict[str, ListedInput]:
    """What the recipe's check sees of each resolved input (core/job_creation.py runs it,
    for a submit and for each of a sweep's trials): its stored file list and what its upload
    read of it (a shared folder has neither: only the nodes see it)."""
    return {name: _listed(session, item) for name, item in resolved.items()}


def _listed(session: Session, item: Mapping[str, Any]) -> ListedInput:
    if "job" in item:  # an earlier job's model: its config read from the store now
        files = [str(f["path"]) for f in item["files"]]
        config = next((f for f in item["files"] if f["path"] == CONFIG), None)
        if config is None:
            return ListedInput(files)
        raw = read_head(config["sha256"], config["size"], MAX_CONFIG_BYTES, CONFIG)
        return ListedInput(files, {"model": config_summary(raw)})
    row = session.get(Dataset, item["dataset"]) if "dataset" in item else None
    if row is None:
        return ListedInput(None)
    files = [str(entry["path"]) for entry in row.files or [] if entry.get("kind") == "file"]
    return ListedInput(files, row.summary)
