"""The node agent's uploader and restore, on PostgreSQL and SQLite, each with both stores:
checkpoints listed with their lineage once their object is whole, keep-last-K applied to rows
and objects, idempotent listing, failures reported, and a node that lacks the checkpoint
getting it from the store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from ampfleet.core.artifact_names import checkpoint_name
from ampfleet.core.artifacts import ArtifactStore, get_store, object_key
from ampfleet.core.artifacts.local import LocalStore
from ampfleet.core.artifacts.s3 import S3Store
from ampfleet.core.db import session_scope
from ampfleet.core.models import Artifact, JobEvent
from ampfleet.core.settings import get_settings
from ampfleet.core.states import JobState
from ampfleet.workers import stored_checkpoints
from ampfleet.workers.stored_checkpoints import Stored
from ampfleet.workers.training.checkpoint import artifact_record
from ampfleet.workers.uploads import ArtifactUploader
from tests.support.env import environment
from tests.support.factories import insert_job

KILL_TEST_BYTES = 64 << 20
LINEAGE = {"precision": "bf16", "allreduce_dtype": "bf16", "world_size": 2, "strategy": "ddp"}


@pytest.fixture
def uploader(backend: str, store_environment: dict[str, str]) -> Iterator[ArtifactUploader]:
    with environment({**store_environment, "AMPFLEET_CHECKPOINT_UPLOAD_TIMEOUT_S": "0.5"}):
        agent_uploads = ArtifactUploader(get_settings())
        agent_uploads.start()
        yield agent_uploads
        agent_uploads.stop(timeout=30)


def _write_checkpoint(folder: Path, step: int) -> dict[str, Any]:
    """The files the loop writes for a step on two ranks, and rank 0's record of them."""
    checkpoint = folder / f"ckpt-{step:09d}"
    checkpoint.mkdir(parents=True, exist_ok=True)
    for rank in (0, 1):
        (checkpoint / f"rng-rank{rank}.pt").write_bytes(f"rng {step} {rank}".encode())
        (checkpoint / f"__{rank}_0.distcp").write_bytes(f"shard {step} {rank}".encode() * 50_000)
    (checkpoint / ".metadata").write_bytes(f"metadata {step}".encode())
    (checkpoint / "meta.json").write_text("{}")
    return {"kind": "artifact", **artifact_record(checkpoint, step, LINEAGE)}


def _settle(uploader: ArtifactUploader, key: tuple[str, int]) -> None:
    deadline = time.monotonic() + 60
    while not uploader.settled(key):
        assert time.monotonic() < deadline, "uploads did not settle"
        time.sleep(0.05)


def _rows(job_id: str) -> list[Artifact]:
    with session_scope() as session:
        rows = session.scalars(
            select(Artifact).where(Artifact.job_id == job_id).order_by(Artifact.name)
        ).all()
        session.expunge_all()
        return list(rows)


def test_checkpoints_are_listed_pruned_and_restored(
    uploader: ArtifactUploader, tmp_path: Path
) -> None:
    job_id = insert_job(state=JobState.RUNNING, attempt=1)  # keep_last is 2
    folder = tmp_path / "node-a" / job_id
    for step in (10, 20, 30):  # each uploaded before the next is made
        uploader.submit((job_id, 1), [_write_checkpoint(folder, step)], [tmp_path])
        _settle(uploader, (job_id, 1))

    rows = _rows(job_id)
    assert [(r.name, r.step, r.kind, r.attempt) for r in rows] == [
        (checkpoint_name(20), 20, "checkpoint", 1),
        (checkpoint_name(30), 30, "checkpoint", 1),
    ]
    assert rows[1].details == {
        **LINEAGE,
        "files": [
            "ckpt-000000030/.metadata",
            "ckpt-000000030/__0_0.distcp",
            "ckpt-000000030/__1_0.distcp",
            "ckpt-000000030/meta.json",
            "ckpt-000000030/rng-rank0.pt",
            "ckpt-000000030/rng-rank1.pt",
        ],
    }
    assert rows[1].content_type == "application/x-tar"
    store = get_store()
    assert sorted(store.keys()) == sorted(object_key(r.sha256) for r in rows)
    assert store.size(object_key(rows[1].sha256)) == rows[1].size
    assert not list(folder.glob("*/.upload-*"))  # the temp tars are gone

    # Another node, with no shared disk: it gets step 30 from the store, once.
    elsewhere = get_settings().checkpoints_dir / job_id
    assert sorted(uploader.restore(job_id)) == rows[1].details["files"]
    for name in rows[1].details["files"]:
        assert (elsewhere / name).read_bytes() == (folder / name).read_bytes()
    restored = sorted(f"{p.parent.name}/{p.name}" for p in elsewhere.glob("*/*"))
    assert restored == rows[1].details["files"]
    assert uploader.restore(job_id) == []


def test_checkpoints_the_job_would_drop_at_once_are_passed_over_and_the_ranks_told(
    uploader: ArtifactUploader, tmp_path: Path
) -> None:
    """A store slower than the ranks checkpoint: of the checkpoints waiting, those with the
    job's keep_last (2) later ones behind them are passed over (the store never falls
    further behind), the last two are stored (each exportable), and the job's checkpoint
    folder says which step the store has (stored_checkpoints.py), before the launch and
    after it."""
    job_id = insert_job(state=JobState.RUNNING, attempt=1)
    ranks_folder = get_settings().checkpoints_dir / job_id
    assert uploader.restore(job_id) == []  # before the launch: the store has none
    assert stored_checkpoints.read(ranks_folder) == Stored(newest_step=None)

    folder = tmp_path / "node-a" / job_id
    records = [_write_checkpoint(folder, step) for step in (10, 20, 30, 40)]
    uploader.submit((job_id, 1), records, [tmp_path])
    _settle(uploader, (job_id, 1))
    assert [(r.name, r.step) for r in _rows(job_id)] == [
        (checkpoint_name(30), 30),
        (checkpoint_name(40), 40),
    ]
    assert len(list(get_store().keys())) == 2
    assert stored_checkpoints.read(ranks_folder) == Stored(newest_step=40)


def test_listing_is_idempotent_and_a_job_without_checkpoints_restores_nothing(
    uploader: ArtifactUploader, tmp_path: Path
) -> None:
    job_id = insert_job(state=JobState.RUNNING, attempt=1)
    assert uploader.restore(job_id) == []

    model = tmp_path / "model.safetensors"
    model.write_bytes(b"weights" * 1000)
    record = {
        "kind": "artifact",
        "artifact_kind": "model",
        "name": "model.safetensors",
        "paths": [str(model)],
        "step": 20,
        "details": {"dtype": "float32"},
    }
    uploader.submit((job_id, 1), [record, record], [tmp_path])  # a replayed record
    _settle(uploader, (job_id, 1))
    uploader.submit((job_id, 1), [record], [tmp_path])
    _settle(uploader, (job_id, 1))
    [row] = _rows(job_id)
    assert (row.name, row.kind, row.size) == ("model.safetensors", "model", 7000)
    assert len(list(get_store().keys())) == 1


class _DownStore:
    """A store every put to fails, as one that is unreachable."""

    def put_stream(self, stream: object) -> None:
        raise ConnectionError("the store is down")


def test_a_failed_upload_is_a_job_event(uploader: ArtifactUploader, tmp_path: Path) -> None:
    job_id = insert_job(state=JobState.RUNNING, attempt=1)
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    record = {
        "kind": "artifact",
        "artifact_kind": "model",
        "name": "model.safetensors",
        "paths": [str(tmp_path / "model.safetensors")],
        "step": None,
    }
    uploader._store = _DownStore  # type: ignore[assignment]
    uploader.submit((job_id, 1), [record], [tmp_path])
    _settle(uploader, (job_id, 1))
    assert _rows(job_id) == []
    with session_scope() as session:
        events = session.scalars(
            select(JobEvent.message).where(
                JobEvent.job_id == job_id, JobEvent.reason == "artifact_upload_failed"
            )
        ).all()
    assert len(events) == 1
    assert "model.safetensors could not be stored" in events[0]


def test_a_folder_named_as_a_file_is_refused_not_read(
    uploader: ArtifactUploader, tmp_path: Path
) -> None:
    job_id = insert_job(state=JobState.RUNNING, attempt=1)
    (tmp_path / "not-a-file").mkdir()
    record = {
        "kind": "artifact",
        "artifact_kind": "output",
        "name": "outputs/x",
        "paths": [str(tmp_path / "not-a-file")],
        "step": None,
    }
    uploader.submit((job_id, 1), [record], [tmp_path])
    _settle(uploader, (job_id, 1))
    assert _rows(job_id) == []
    with session_scope() as session:
        events = session.scalars(
            select(JobEvent.message).where(
                JobEvent.job_id == job_id, JobEvent.reason == "artifact_refused"
            )
        ).all()
    assert len(events) == 1
    assert "outputs/x: not uploaded" in events[0]


def _upload_in_progress(store: ArtifactStore) -> bool:
    """Bytes are on their way into the store, not yet under a key."""
    if isinstance(store, LocalStore):
        return any(p.stat().st_size > 0 for p in (store.root / ".incoming").iterdir())
    assert isinstance(store, S3Store)
    uploads = store.client.list_multipart_uploads(Bucket=store.bucket, Prefix=store.prefix)
    return bool(uploads.get("Uploads"))


def test_a_worker_killed_mid_upload_leaves_no_listed_checkpoint(
    uploader: ArtifactUploader, tmp_path: Path
) -> None:
    job_id = insert_job(state=JobState.RUNNING, attempt=1)
    folder = tmp_path / job_id
    record = _write_checkpoint(folder, 10)
    with (folder / "ckpt-000000010" / "__0_0.distcp").open(
        "r+b"
    ) as model:  # big enough to catch mid-way
        model.truncate(KILL_TEST_BYTES)
    store = get_store()
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.upload_worker",
            job_id,
            "1",
            json.dumps(record),
            str(tmp_path),
        ],
        env=dict(os.environ),
    )
    try:
        deadline = time.monotonic() + 120
        while not _upload_in_progress(store):
            assert child.poll() is None, "the upload ended before it could be interrupted"
            assert time.monotonic() < deadline, "the upload never started"
            time.sleep(0.001)
    finally:
        child.kill()
        child.wait(timeout=30)
    assert _rows(job_id) == []
    assert list(store.keys()) == []
