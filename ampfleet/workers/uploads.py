"""The node agent's side of the artifact store: uploads in the background, restores before
launch.

Ranks never talk to the store (they hold no credentials): rank 0 writes a file locally,
atomically, and appends an `artifact` record; the supervisor hands each record to this
uploader after the transaction that read it committed. One thread per node then packs a
checkpoint into a tar, puts it into the store, lists the row (with the checkpoint's lineage)
and applies keep-last-K to rows and objects. None of it is on the training path or inside the
supervisor's transaction, so a slow or unreachable store never stalls a step. An attempt's
outcome waits (bounded) until its uploads are done: the model is listed by the time the job is
SUCCEEDED, and a requeued job's last checkpoint is in the store for whichever node runs it
next. A failed upload is retried with backoff and, in the end, reported as a job event.

When the store is slower than the ranks checkpoint, a checkpoint with the job's `keep_last`
later ones waiting behind it is passed over (keep-last-K would drop it at once): the store
gets the newest, never falls further behind, and holds every checkpoint the job keeps. The
ranks keep what the store lacks (stored_checkpoints.py: told before each launch and after
each checkpoint listed), so nothing is deleted before its upload.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any, BinaryIO, cast

from ampfleet.core import profiles
from ampfleet.core.artifact_names import PROFILE_KIND
from ampfleet.core.artifacts import ArtifactStore, catalog, get_store, object_key
from ampfleet.core.db import get_read_sessionmaker, session_scope
from ampfleet.core.lifecycle import record_event
from ampfleet.core.models import Artifact, Job
from ampfleet.core.settings import Settings
from ampfleet.workers import beneath, stored_checkpoints
from ampfleet.workers.checkpoint_archive import (
    BoundedReader,
    TooLargeError,
    archive_name,
    pack,
    unpack,
)
from ampfleet.workers.fair_queue import FairQueue
from ampfleet.workers.ingest import count_rejected

log = logging.getLogger(__name__)
UPLOAD_NICENESS = 19
RETRY_DELAYS_S = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)
CONTENT_TYPES = {".json": "application/json", ".safetensors": "application/octet-stream"}
AttemptKey = tuple[str, int]


@dataclass(frozen=True)
class PendingUpload:
    job_id: str
    attempt: int
    kind: str
    name: str
    files: tuple[tuple[Path, PurePath], ...]
    """Each file as (the attempt's folder it lies in, its path beneath that folder)."""
    step: int | None
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_record(
        cls, key: AttemptKey, record: dict[str, Any], folders: Sequence[Path]
    ) -> PendingUpload:
        """From an `artifact` record (its shape checked: records.py); each path it names must
        lie in one of `folders` (RefusedPathError otherwise), and is opened beneath it."""
        return cls(
            job_id=key[0],
            attempt=key[1],
            kind=record["artifact_kind"],
            name=record["name"],
            files=tuple(beneath.place(p, folders) for p in record["paths"]),
            step=record.get("step"),
            details=dict(record.get("details") or {}),
        )


class ArtifactUploader:
    def __init__(self, settings: Settings, store: Callable[[], ArtifactStore] = get_store) -> None:
        self.settings = settings
        self._store = store
        self._queue: FairQueue[PendingUpload] = FairQueue()  # attempts take turns
        self._pending: Counter[AttemptKey] = Counter()
        self._checkpoints_waiting: Counter[str] = Counter()
        """Each job's checkpoints handed over and not yet taken up."""
        self._keep_last: dict[str, int] = {}
        """The keep_last of each job with checkpoints waiting, read once its backlog forms."""
        self._telling = threading.Lock()  # the restore thread and this one write stored.json
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="artifact-uploads", daemon=True)
        # Restores have their own thread: a launch never waits behind another job's uploads.
        self._restores = ThreadPoolExecutor(max_workers=1, thread_name_prefix="restore")

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float) -> None:
        self._queue.close()
        self._thread.join(timeout=timeout)
        self._restores.shutdown(wait=False, cancel_futures=True)

    # -- uploads --------------------------------------------------------------------------

    def submit(
        self, key: AttemptKey, records: list[dict[str, Any]], folders: Sequence[Path]
    ) -> None:
        """`folders`: the attempt's own, where its records may name files."""
        for record in records:
            try:
                upload = PendingUpload.from_record(key, record, folders)
            except (KeyError, TypeError, ValueError, OSError) as exc:
                self._refuse(key, record.get("name"), exc)
                continue
            with self._lock:
                self._pending[key] += 1
                if upload.kind == catalog.CHECKPOINT:
                    self._checkpoints_waiting[upload.job_id] += 1
            self._queue.put(key, upload)

    def settled(self, key: AttemptKey) -> bool:
        """Whether every upload of the attempt handed over so far is done (or given up)."""
        with self._lock:
            return self._pending[key] == 0

    def _run(self) -> None:
        # The lowest CPU priority for this thread alone (Linux schedules threads as tasks):
        # on a node whose cores the ranks keep busy, packing and hashing take what is left.
        with contextlib.suppress(OSError, AttributeError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), UPLOAD_NICENESS)
        while (upload := self._queue.get()) is not None:
            try:
                if not self._superseded(upload):
                    self._upload(upload)
            except Exception:
                log.exception("artifact %s of %s failed", upload.name, upload.job_id)
            finally:
                with self._lock:
                    self._pending[(upload.job_id, upload.attempt)] -= 1

    def _superseded(self, upload: PendingUpload) -> bool:
        """A checkpoint with as many later ones of its job waiting behind it as the job keeps
        (`checkpoint.keep_last`): keep-last-K would drop it as soon as they are listed, so the
        store gets those. Every checkpoint the job keeps is stored and exportable."""
        if upload.kind != catalog.CHECKPOINT:
            return False
        with self._lock:
            self._checkpoints_waiting[upload.job_id] -= 1
            later = self._checkpoints_waiting[upload.job_id]
            if not later:
                del self._checkpoints_waiting[upload.job_id]
                self._keep_last.pop(upload.job_id, None)
        if not later:
            return False
        keep = self._keep_last.get(upload.job_id)
        if keep is None:  # read once per backlog, however many checkpoints a rank hands over
            keep = self._keep_last[upload.job_id] = _read_keep_last(upload.job_id)
        if later < keep:
            return False
        log.info(
            "passing over %s of %s: %d later checkpoints wait and it keeps the last %d",
            upload.name,
            upload.job_id,
            later,
            keep,
        )
        return True

    def _refuse(self, key: AttemptKey, name: object, exc: Exception) -> None:
        """A file the ranks handed over that the agent will not read: said as a job event."""
        log.warning("refusing artifact %.100r of %s: %s", name, key, exc)
        try:
            with session_scope() as session:
                job = session.get(Job, key[0])
                if job is not None:
                    record_event(
                        session, job, "artifact_refused", f"{name}: not uploaded: {exc}"[:2000]
                    )
                    count_rejected(session, job.id, 1)
        except Exception:
            log.exception("could not record the refused artifact %.100r", name)

    def _upload(self, upload: PendingUpload) -> None:
        deadline = time.monotonic() + self.settings.checkpoint_upload_timeout_s
        for delay in (*RETRY_DELAYS_S, None):
            try:
                self._put_and_list(upload)
                return
            except (beneath.RefusedPathError, TooLargeError) as exc:
                self._refuse((upload.job_id, upload.attempt), upload.name, exc)
                return
            except FileNotFoundError:
                # Deleted by the ranks (keep-last-K past what it keeps for the store, in an
                # event of theirs, or ranks that ignore stored.json): a later one is queued.
                log.info("artifact %s of %s is gone before upload", upload.name, upload.job_id)
                return
            except Exception as exc:
                if delay is None or time.monotonic() + delay > deadline:
                    self._report_failure(upload, exc)
                    return
                log.warning("uploading %s of %s failed; retrying", upload.name, upload.job_id)
                time.sleep(delay)

    def _put_and_list(self, upload: PendingUpload) -> None:
        store = self._store()
        details = dict(upload.details)
        limit = self.settings.max_artifact_bytes
        if upload.kind == catalog.CHECKPOINT:
            self.settings.staging_dir.mkdir(parents=True, exist_ok=True)
            archive = pack(upload.files, self.settings.staging_dir, limit)
            details["files"] = sorted(archive_name(relative) for _, relative in upload.files)
            content_type = catalog.TAR
            try:
                with archive.open("rb") as source:
                    stored = store.put_stream(source)
            finally:
                archive.unlink(missing_ok=True)
        else:
            ((folder, relative),) = upload.files
            with os.fdopen(beneath.open_regular(folder, relative), "rb") as source:
                if os.fstat(source.fileno()).st_size > limit:
                    raise TooLargeError(f"over the largest artifact, {limit} bytes")
                stored = store.put_stream(cast(BinaryIO, BoundedReader(source, limit)))
            content_type = CONTENT_TYPES.get(relative.suffix, "application/octet-stream")
        newest: int | None = None
        with session_scope() as session:
            job = session.get(Job, upload.job_id)
            if job is None:  # deleted meanwhile: its object is nobody's
                garbage = catalog.unreferenced(session, [stored.sha256])
            else:
                replaced = catalog.list_artifact(
                    session,
                    job,
                    kind=upload.kind,
                    name=upload.name,
                    attempt=upload.attempt,
                    step=upload.step,
                    stored=stored,
                    content_type=content_type,
                    details=details,
                )
                dropped = [replaced] if replaced else []
                if upload.kind == PROFILE_KIND:
                    profiles.artifact_listed(session, upload.name)
                if upload.kind == catalog.CHECKPOINT:
                    keep = int(job.resolved["checkpoint"]["keep_last"])
                    dropped += catalog.prune_checkpoints(session, job.id, keep)
                    newest = _step_of(catalog.latest_checkpoint(session, job.id))
                garbage = catalog.unreferenced(session, dropped)
        for sha256 in garbage:  # after the commit: a row never names a deleted object
            store.delete(object_key(sha256))
        if upload.kind == catalog.CHECKPOINT and job is not None:
            self._tell_ranks(upload.job_id, newest)  # after the commit, too

    def _report_failure(self, upload: PendingUpload, exc: Exception) -> None:
        log.error("giving up on artifact %s of %s: %s", upload.name, upload.job_id, exc)
        try:
            with session_scope() as session:
                job = session.get(Job, upload.job_id)
                if job is not None:
                    record_event(
                        session,
                        job,
                        "artifact_upload_failed",
                        f"{upload.name} could not be stored: {type(exc).__name__}: {exc}"[:2000],
                    )
                if upload.kind == PROFILE_KIND:
                    profiles.upload_failed(session, upload.name, f"{type(exc).__name__}: {exc}")
        except Exception:
            log.exception("could not record the failed upload of %s", upload.name)

    # -- restores -------------------------------------------------------------------------

    def restore_then(self, job_id: str, then: Callable[[], None]) -> None:
        """Unless this node already holds the job's latest listed checkpoint, downloads and
        unpacks it into the job's checkpoint folder; then calls `then` (the launch), also
        when the restore failed (the attempt starts from what this node has, and says so)."""

        def restore_and_launch() -> None:
            try:
                self.restore(job_id)
            except Exception as exc:
                log.exception("restoring the checkpoint of %s failed", job_id)
                self._report_restore_failure(job_id, exc)
            then()

        self._restores.submit(restore_and_launch)

    def restore(self, job_id: str) -> list[str]:
        """The names of the files it put in place; none when the node had them already."""
        with get_read_sessionmaker()() as session:
            row = catalog.latest_checkpoint(session, job_id)
            self._tell_ranks(job_id, _step_of(row))  # before the launch: what the store has
            if row is None:
                return []
            sha256, files = row.sha256, list(row.details.get("files", []))
        folder = self.settings.checkpoints_dir / job_id
        if files and all((folder / name).exists() for name in files):
            return []
        folder.mkdir(parents=True, exist_ok=True)
        archive = folder / f".restore-{sha256[:16]}.tar"
        try:
            self._store().download_to(object_key(sha256), archive)
            restored = unpack(archive, folder)
        finally:
            archive.unlink(missing_ok=True)
        log.info("restored %d checkpoint file(s) of %s from the store", len(restored), job_id)
        return restored

    def _tell_ranks(self, job_id: str, newest_step: int | None) -> None:
        """stored.json in the job's checkpoint folder: what its ranks' keep-last-K spares."""
        folder = self.settings.checkpoints_dir / job_id
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with self._telling:
                stored_checkpoints.tell_ranks(folder, newest_step)
        except OSError as exc:  # the ranks keep what they were told last, or keep-last-K
            log.warning("could not tell the ranks of %s what the store has: %s", job_id, exc)

    def _report_restore_failure(self, job_id: str, exc: Exception) -> None:
        try:
            with session_scope() as session:
                job = session.get(Job, job_id)
                if job is not None:
                    record_event(
                        session,
                        job,
                        "checkpoint_restore_failed",
                        f"the latest checkpoint could not be fetched from the artifact store "
                        f"({type(exc).__name__}: {exc}); starting from this node's own"[:2000],
                    )
        except Exception:
            log.exception("could not record the failed restore of %s", job_id)


def _step_of(row: Artifact | None) -> int | None:
    return None if row is None else row.step


def _read_keep_last(job_id: str) -> int:
    """The job's keep-last-K; 1 where it cannot be read (the job deleted meanwhile)."""
    try:
        with get_read_sessionmaker()() as session:
            job = session.get(Job, job_id)
            return 1 if job is None else int(job.resolved["checkpoint"]["keep_last"])
    except Exception:
        log.exception("could not read the checkpoint policy of %s", job_id)
        return 1
