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
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ampfleet.core import profiles
from ampfleet.core.artifact_names import PROFILE_KIND
from ampfleet.core.artifacts import ArtifactStore, catalog, get_store, object_key
from ampfleet.core.db import get_read_sessionmaker, session_scope
from ampfleet.core.lifecycle import record_event
from ampfleet.core.models import Job
from ampfleet.core.settings import Settings
from ampfleet.workers.checkpoint_archive import archive_name, pack, unpack
from ampfleet.workers.rundir import RunDir

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
    paths: tuple[Path, ...]
    step: int | None
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_record(cls, key: AttemptKey, record: dict[str, Any]) -> PendingUpload:
        step = record.get("step")
        return cls(
            job_id=key[0],
            attempt=key[1],
            kind=str(record["artifact_kind"]),
            name=str(record["name"]),
            paths=tuple(Path(p) for p in record["paths"]),
            step=None if step is None else int(step),
            details=dict(record.get("details") or {}),
        )


class ArtifactUploader:
    def __init__(self, settings: Settings, store: Callable[[], ArtifactStore] = get_store) -> None:
        self.settings = settings
        self._store = store
        self._queue: queue.Queue[PendingUpload | None] = queue.Queue()
        self._pending: Counter[AttemptKey] = Counter()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="artifact-uploads", daemon=True)
        # Restores have their own thread: a launch never waits behind another job's uploads.
        self._restores = ThreadPoolExecutor(max_workers=1, thread_name_prefix="restore")

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float) -> None:
        self._queue.put(None)
        self._thread.join(timeout=timeout)
        self._restores.shutdown(wait=False, cancel_futures=True)

    # -- uploads --------------------------------------------------------------------------

    def submit(self, key: AttemptKey, records: list[dict[str, Any]]) -> None:
        for record in records:
            try:
                upload = PendingUpload.from_record(key, record)
            except (KeyError, TypeError, ValueError):
                log.warning("ignoring a malformed artifact record of %s: %.200r", key, record)
                continue
            with self._lock:
                self._pending[key] += 1
            self._queue.put(upload)

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
                self._upload(upload)
            except Exception:
                log.exception("artifact %s of %s failed", upload.name, upload.job_id)
            finally:
                with self._lock:
                    self._pending[(upload.job_id, upload.attempt)] -= 1

    def _upload(self, upload: PendingUpload) -> None:
        deadline = time.monotonic() + self.settings.checkpoint_upload_timeout_s
        for delay in (*RETRY_DELAYS_S, None):
            try:
                self._put_and_list(upload)
                return
            except FileNotFoundError:
                # Pruned by the loop's keep-last-K before its turn came: a later one is queued.
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
        if upload.kind == catalog.CHECKPOINT:
            source = pack(upload.paths, upload.paths[0].parent)
            details["files"] = sorted(archive_name(p) for p in upload.paths)
            content_type = catalog.TAR
        else:
            source = upload.paths[0]
            content_type = CONTENT_TYPES.get(source.suffix, "application/octet-stream")
        try:
            stored = store.put_file(source)
        finally:
            if source not in upload.paths:
                source.unlink(missing_ok=True)
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
                garbage = catalog.unreferenced(session, dropped)
        for sha256 in garbage:  # after the commit: a row never names a deleted object
            store.delete(object_key(sha256))

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

    def restore_then(self, run_dir: RunDir, job_id: str, then: Callable[[], None]) -> None:
        """Unless this node already holds the job's latest listed checkpoint, downloads and
        unpacks it into the job's checkpoint folder; then calls `then` (the launch), also
        when the restore failed (the attempt starts from what this node has, and says so)."""

        def restore_and_launch() -> None:
            try:
                self.restore(run_dir, job_id)
            except Exception as exc:
                log.exception("restoring the checkpoint of %s failed", job_id)
                self._report_restore_failure(job_id, exc)
            then()

        self._restores.submit(restore_and_launch)

    def restore(self, run_dir: RunDir, job_id: str) -> list[str]:
        """The names of the files it put in place; none when the node had them already."""
        folder = Path(json.loads(run_dir.job_file.read_text())["checkpoint_dir"])
        with get_read_sessionmaker()() as session:
            row = catalog.latest_checkpoint(session, job_id)
            if row is None:
                return []
            sha256, files = row.sha256, list(row.details.get("files", []))
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
