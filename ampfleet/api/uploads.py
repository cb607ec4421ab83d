"""Streamed upload bodies (bundles, datasets): spooled to a file next to the store while
they are counted and hashed, so an upload is never held in memory, and one over its limit
is cut off at the limit with a 413 that names the limit."""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

from fastapi import Request
from sqlalchemy.orm import Session

from ampfleet.api.auth import Principal
from ampfleet.api.errors import NotFoundError, PayloadTooLargeError, UnprocessableError
from ampfleet.core.archives import ArchiveLimits
from ampfleet.core.artifacts import get_store, object_key
from ampfleet.core.artifacts.catalog import unreferenced
from ampfleet.core.db import session_scope
from ampfleet.core.settings import get_settings

log = logging.getLogger(__name__)

Row = TypeVar("Row")


def upload_body(description: str) -> dict[str, Any]:
    """The OpenAPI request body of an upload route: the bytes, streamed, not JSON."""
    media_types = ("application/zip", "application/gzip", "application/octet-stream")
    return {
        "requestBody": {
            "required": True,
            "description": description,
            "content": {m: {"schema": {"type": "string", "format": "binary"}} for m in media_types},
        }
    }


def visible(
    session: Session, model: type[Row], row_id: str, principal: Principal, what: str
) -> Row:
    """An uploaded object by id, 404 when it is missing or another project's."""
    row = session.get(model, row_id)
    if row is None:
        raise NotFoundError(f"{what} {row_id} not found")
    principal.check_visible(row.project, f"{what} {row_id}")  # type: ignore[attr-defined]
    return row


@dataclass(frozen=True)
class Spooled:
    path: Path
    size: int
    sha256: str


@dataclass(frozen=True)
class UploadLimit:
    """The largest body an upload route takes, with the setting that sets it and advice."""

    bytes: int
    setting: str
    advice: str

    def exceeded(self) -> PayloadTooLargeError:
        error = PayloadTooLargeError(
            f"the upload is larger than {self.setting} = {self.bytes} bytes "
            f"({self.bytes / (1 << 20):.1f} MiB); {self.advice}"
        )
        error.headers = {"connection": "close"}  # the rest of the body is not read
        return error


async def spool(request: Request, out: IO[bytes], path: Path, limit: UploadLimit) -> Spooled:
    """Writes the request body to `out`, counting and hashing it; 413 past the limit."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit.bytes:
        raise limit.exceeded()
    digest = hashlib.sha256()
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit.bytes:
            raise limit.exceeded()
        digest.update(chunk)
        out.write(chunk)
    out.flush()
    if size == 0:
        raise UnprocessableError.for_field("body", "empty; send the file's bytes")
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


def drop_object_if_unreferenced(sha256: str) -> None:
    """After the deleting transaction committed: the object goes when no row names it."""
    with session_scope() as session:
        garbage = unreferenced(session, [sha256])
    for digest in garbage:
        try:
            get_store().delete(object_key(digest))
        except Exception as exc:  # an object left behind costs space, never correctness
            log.warning("uploaded object %s not deleted: %s", digest, type(exc).__name__)
