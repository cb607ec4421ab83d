"""Rules of datasets: who may upload, the size limit, archives checked as bundles are, one
version per project, name and content, versions counting up, what is read of it for the
checks at submit (core/dataset_summary.py), and when the object goes.

A dataset is data, not code: a write key of its project may upload one whether or not the
project allows custom code. Nothing in it is unpacked here; nodes unpack it into a cache
keyed by its sha256 (`workers.inputs`) and ranks see it read-only.
"""

from __future__ import annotations

import logging

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ampfleet.api.auth import Principal
from ampfleet.api.datasets import repository
from ampfleet.api.datasets.schemas import DatasetDetail, DatasetList, DatasetOut
from ampfleet.api.errors import (
    ConflictError,
    ServiceUnavailableError,
    UnprocessableError,
)
from ampfleet.api.uploads import Spooled, UploadLimit, archive_limits, visible
from ampfleet.core.archives import ArchiveRefusedError, inspect_archive
from ampfleet.core.artifacts import get_store
from ampfleet.core.dataset_summary import summarize
from ampfleet.core.ids import new_id
from ampfleet.core.models import Dataset
from ampfleet.core.settings import get_settings

log = logging.getLogger(__name__)

VERSION_RACES = 5
"""Concurrent uploads of other bytes under one name: each takes the next free version."""


def upload_limit() -> UploadLimit:
    return UploadLimit(
        get_settings().max_dataset_bytes,
        "AMPFLEET_MAX_DATASET_BYTES",
        "split it into several datasets, or let the operator allow a shared folder "
        "(AMPFLEET_DATA_ROOTS) that specs name as file:///...",
    )


def create(
    session: Session, project: str, name: str, filename: str | None, spooled: Spooled
) -> tuple[DatasetDetail, bool]:
    """The version of `name` that holds these bytes, and whether it is new (201) or not."""
    existing = repository.by_content(session, project, name, spooled.sha256)
    if existing is not None:
        return _detail(existing), False
    files: list[dict[str, str | int]]
    entries = None
    if filename is not None:
        kind, files = "file", [{"path": filename, "size": spooled.size, "kind": "file"}]
    else:
        try:
            kind, entries = inspect_archive(spooled.path, archive_limits())
        except ArchiveRefusedError as exc:
            raise UnprocessableError.for_field(
                "body", f"{exc} (a single file is uploaded with ?filename=NAME)"
            ) from None
        files = [{"path": e.path, "size": e.size, "kind": e.kind} for e in entries]
    # Read once here, checked at every submit that names it (recipes' check_listed_inputs).
    summary = summarize(spooled.path, filename, entries)
    try:
        get_store().put_file(spooled.path)
    except Exception as exc:  # a store that is down (S3 unreachable, disk full)
        log.warning("artifact store unavailable for a dataset: %s", type(exc).__name__)
        raise ServiceUnavailableError("the artifact store is unavailable; retry shortly") from None
    for _ in range(VERSION_RACES):
        row = Dataset(
            id=new_id("dts"),
            project=project,
            name=name,
            version=repository.next_version(session, project, name),
            sha256=spooled.sha256,
            size=spooled.size,
            format=kind,
            filename=filename,
            file_count=sum(1 for f in files if f["kind"] == "file"),
            unpacked_size=sum(int(f["size"]) for f in files),
            files=files,
            summary=summary,
        )
        try:
            with session.begin_nested():
                session.add(row)
            return _detail(row), True
        except IntegrityError:  # the same bytes listed first, or this version taken meanwhile
            existing = repository.by_content(session, project, name, spooled.sha256)
            if existing is not None:
                return _detail(existing), False
    raise ConflictError(f"dataset {name} is being uploaded by many clients at once; retry")


def get(session: Session, dataset_id: str, principal: Principal) -> Dataset:
    return visible(session, Dataset, dataset_id, principal, "dataset")


def detail(session: Session, dataset_id: str, principal: Principal) -> DatasetDetail:
    return _detail(get(session, dataset_id, principal))


def list_datasets(
    session: Session, principal: Principal, project: str | None, name: str | None, limit: int
) -> DatasetList:
    if not principal.is_admin:
        project = principal.project
    rows = repository.listed(session, project, name, limit)
    return DatasetList(items=[DatasetOut.model_validate(row, from_attributes=True) for row in rows])


def delete(session: Session, dataset_id: str, principal: Principal) -> str:
    """Deletes the row; the sha256 whose object may go once this transaction committed."""
    row = get(session, dataset_id, principal)
    principal.check_can_write(row.project)
    users = repository.unfinished_jobs_using(session, row)
    if users:
        raise ConflictError(
            f"dataset {row.name}@{row.version} is an input of unfinished jobs "
            f"({', '.join(users)}); delete it once they ended"
        )
    session.delete(row)
    session.flush()
    return row.sha256


def _detail(row: Dataset) -> DatasetDetail:
    return DatasetDetail.model_validate(row, from_attributes=True)
