"""Rules of code bundles: who may upload, the size limit, the archive checks, one bundle per
project and content, and when the object goes.

The body is spooled to a file next to the store while it is counted and hashed (a bundle is
never held in memory, and one over the limit is cut off at the limit), checked as an archive
(`core.archives`) and only then put into the store and listed. Nothing in it is unpacked or
run here: the API only reads the archive's directory.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from fastapi import Request
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ampfleet.api.auth import ForbiddenError, Principal
from ampfleet.api.bundles import repository
from ampfleet.api.bundles.schemas import BundleDetail, BundleList, BundleOut
from ampfleet.api.errors import (
    ConflictError,
    NotFoundError,
    PayloadTooLargeError,
    ServiceUnavailableError,
    UnprocessableError,
)
from ampfleet.core.archives import ArchiveLimits, ArchiveRefusedError, inspect_archive
from ampfleet.core.artifacts import get_store, object_key
from ampfleet.core.artifacts.catalog import unreferenced
from ampfleet.core.custom_code import custom_code_allowed, custom_code_refusal
from ampfleet.core.db import session_scope
from ampfleet.core.ids import new_id
from ampfleet.core.models import Bundle
from ampfleet.core.settings import get_settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Spooled:
    path: Path
    size: int
    sha256: str


def check_may_upload(session: Session, principal: Principal, project: str) -> None:
    """Before a byte of the body is read: a write key of a project that allows custom code."""
    principal.check_can_write(project)
    if not custom_code_allowed(session, project):
        raise ForbiddenError(custom_code_refusal(project))


def too_large() -> PayloadTooLargeError:
    limit = get_settings().max_bundle_bytes
    error = PayloadTooLargeError(
        f"the bundle is larger than AMPFLEET_MAX_BUNDLE_BYTES = {limit} bytes "
        f"({limit / (1 << 20):.1f} MiB); leave out data and build outputs, or upload data "
        "as a dataset"
    )
    error.headers = {"connection": "close"}  # the rest of the body is not read
    return error


async def spool(request: Request, out: IO[bytes], path: Path) -> Spooled:
    """Writes the request body to `out`, counting and hashing it; 413 past the limit."""
    limit = get_settings().max_bundle_bytes
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large()
    digest = hashlib.sha256()
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large()
        digest.update(chunk)
        out.write(chunk)
    out.flush()
    if size == 0:
        raise UnprocessableError.for_field("body", "empty; send the archive's bytes")
    return Spooled(path=path, size=size, sha256=digest.hexdigest())


def spool_folder() -> Path:
    folder = get_settings().data_dir.resolve() / "uploads"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def archive_limits() -> ArchiveLimits:
    settings = get_settings()
    return ArchiveLimits(
        max_files=settings.max_archive_files,
        max_unpacked_bytes=settings.max_archive_unpacked_bytes,
    )


def create(session: Session, project: str, spooled: Spooled) -> tuple[BundleDetail, bool]:
    """The bundle of these bytes in `project`, and whether it is new (201) or known (200)."""
    existing = repository.by_content(session, project, spooled.sha256)
    if existing is not None:
        return _detail(existing), False
    try:
        kind, entries = inspect_archive(spooled.path, archive_limits())
    except ArchiveRefusedError as exc:
        raise UnprocessableError.for_field("body", str(exc)) from None
    try:
        stored = get_store().put_file(spooled.path)
    except Exception as exc:  # a store that is down (S3 unreachable, disk full)
        log.warning("artifact store unavailable for a bundle: %s", type(exc).__name__)
        raise ServiceUnavailableError("the artifact store is unavailable; retry shortly") from None
    row = Bundle(
        id=new_id("bnd"),
        project=project,
        sha256=stored.sha256,
        size=stored.size,
        format=kind,
        file_count=sum(1 for entry in entries if entry.kind == "file"),
        unpacked_size=sum(entry.size for entry in entries),
        files=[{"path": e.path, "size": e.size, "kind": e.kind} for e in entries],
    )
    try:
        with session.begin_nested():
            session.add(row)
    except IntegrityError:  # the same bytes, uploaded at the same time, listed first
        existing = repository.by_content(session, project, spooled.sha256)
        if existing is None:
            raise
        return _detail(existing), False
    return _detail(row), True


def get(session: Session, bundle_id: str, principal: Principal) -> Bundle:
    row = session.get(Bundle, bundle_id)
    if row is None:
        raise NotFoundError(f"bundle {bundle_id} not found")
    principal.check_visible(row.project, f"bundle {bundle_id}")
    return row


def detail(session: Session, bundle_id: str, principal: Principal) -> BundleDetail:
    return _detail(get(session, bundle_id, principal))


def list_bundles(
    session: Session, principal: Principal, project: str | None, limit: int
) -> BundleList:
    if not principal.is_admin:
        project = principal.project
    rows = repository.listed(session, project, limit)
    return BundleList(items=[BundleOut.model_validate(row, from_attributes=True) for row in rows])


def delete(session: Session, bundle_id: str, principal: Principal) -> str:
    """Deletes the row; the sha256 whose object may go once this transaction committed."""
    row = get(session, bundle_id, principal)
    principal.check_can_write(row.project)
    # Its bytes would go while a node may still have to fetch them (a start, a restart).
    users = repository.unfinished_jobs_of(session, row)
    if users:
        raise ConflictError(
            f"bundle {bundle_id} is in use by unfinished jobs ({', '.join(users)}); "
            "delete it once they ended"
        )
    session.delete(row)
    session.flush()
    return row.sha256


def drop_object_if_unreferenced(sha256: str) -> None:
    """After the deleting transaction committed: the object goes when no row names it."""
    with session_scope() as session:
        garbage = unreferenced(session, [sha256])
    for digest in garbage:
        try:
            get_store().delete(object_key(digest))
        except Exception as exc:  # an object left behind costs space, never correctness
            log.warning("bundle object %s not deleted: %s", digest, type(exc).__name__)


def _detail(row: Bundle) -> BundleDetail:
    return BundleDetail.model_validate(row, from_attributes=True)
