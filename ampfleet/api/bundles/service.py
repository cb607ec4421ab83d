"""Rules of code bundles: who may upload, the size limit, the archive checks, the code
compiles, one bundle per project and content, what a job's entrypoint may name, and when the
object goes.

The body is spooled (`api.uploads`), checked as an archive (`core.archives`), its Python
files compiled (`core.python_sources`) and only then put into the store and listed. Nothing
in it is unpacked, imported or run here: the API reads the archive's directory and compiles
source, which executes none of it.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ampfleet.api.auth import ForbiddenError, Principal
from ampfleet.api.bundles import repository
from ampfleet.api.bundles.schemas import BundleDetail, BundleList, BundleOut
from ampfleet.api.errors import (
    ConflictError,
    ServiceUnavailableError,
    UnprocessableError,
)
from ampfleet.api.uploads import Spooled, UploadLimit, archive_limits, visible
from ampfleet.core.archives import ArchiveRefusedError, inspect_archive
from ampfleet.core.artifacts import get_store
from ampfleet.core.custom_code import custom_code_allowed, custom_code_refusal
from ampfleet.core.ids import new_id
from ampfleet.core.models import Bundle
from ampfleet.core.python_sources import SourceLimits, SourceRefusedError, module_names
from ampfleet.core.settings import get_settings

log = logging.getLogger(__name__)


def check_may_upload(session: Session, principal: Principal, project: str) -> None:
    """Before a byte of the body is read: a write key of a project that allows custom code."""
    principal.check_can_write(project)
    if not custom_code_allowed(session, project):
        raise ForbiddenError(custom_code_refusal(project))


def upload_limit() -> UploadLimit:
    return UploadLimit(
        get_settings().max_bundle_bytes,
        "AMPFLEET_MAX_BUNDLE_BYTES",
        "leave out data and build outputs, or upload data as a dataset",
    )


def create(session: Session, project: str, spooled: Spooled) -> tuple[BundleDetail, bool]:
    """The bundle of these bytes in `project`, and whether it is new (201) or known (200)."""
    existing = repository.by_content(session, project, spooled.sha256)
    if existing is not None:
        return _detail(existing), False
    try:
        kind, entries = inspect_archive(spooled.path, archive_limits())
        names = module_names(spooled.path, entries, SourceLimits(_max_source_bytes()))
    except (ArchiveRefusedError, SourceRefusedError) as exc:
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
        files=[_listed(e.path, e.size, e.kind, names) for e in entries],
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


def _max_source_bytes() -> int:
    return get_settings().max_bundle_source_bytes


def _listed(path: str, size: int, kind: str, names: dict[str, list[str] | None]) -> dict[str, Any]:
    """A file as the row lists it; a module also with the names it binds (`defines`), where
    they are known, for the entrypoint check at submit."""
    row: dict[str, Any] = {"path": path, "size": size, "kind": kind}
    if names.get(path) is not None:
        row["defines"] = names[path]
    return row


def bundle_files(bundle: Bundle) -> set[str]:
    """The paths of the bundle's files and links, as the nodes unpack them: what a job may
    name in it (an entrypoint's module, a script)."""
    return {e["path"] for e in bundle.files or [] if e.get("kind") in ("file", "symlink")}


def entrypoint_problem(bundle: Bundle, entrypoint: str) -> str | None:
    """Why `package.module:attribute` names nothing in the bundle, or None: the module is
    one of its files (`package/module.py` or `package/module/__init__.py`, as the ranks
    import it with the bundle first on the path) and, where its names were kept at upload,
    binds `attribute` at module level. Read from the row: nothing is imported."""
    module, _, attribute = entrypoint.partition(":")
    stem = module.replace(".", "/")
    candidates = (f"{stem}.py", f"{stem}/__init__.py")
    listed = {entry["path"]: entry for entry in bundle.files or []}
    found = next((listed[path] for path in candidates if path in listed), None)
    if found is None or found["kind"] not in ("file", "symlink"):
        top = sorted({path.split("/", 1)[0] for path in listed})
        return (
            f"no module {module} in bundle {bundle.id}: it holds neither {candidates[0]} "
            f"nor {candidates[1]} (its top level: {', '.join(top[:20]) or 'nothing'})"
        )
    defines = found.get("defines")  # absent: unknowable (a star import, a link, older rows)
    if defines is not None and attribute not in defines:
        return (
            f"{found['path']} defines no {attribute} at module level (it binds "
            f"{', '.join(defines[:20]) or 'nothing'}{', ...' if len(defines) > 20 else ''})"
        )
    return None


def get(session: Session, bundle_id: str, principal: Principal) -> Bundle:
    return visible(session, Bundle, bundle_id, principal, "bundle")


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
    sweeps = repository.running_sweeps_of(session, row)
    if sweeps:
        raise ConflictError(
            f"bundle {bundle_id} is the base of running sweeps ({', '.join(sweeps)}); delete "
            "it once they ended, or cancel them"
        )
    session.delete(row)
    session.flush()
    return row.sha256


def _detail(row: Bundle) -> BundleDetail:
    return BundleDetail.model_validate(row, from_attributes=True)
