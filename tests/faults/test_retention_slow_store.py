"""Retention under an artifact store that falls behind: two real ranks checkpoint every step
while the store takes nothing in (each put waits at a gate), and the node agent's uploader
gets each checkpoint as the supervisor hands it over. Keep-last-K deletes no checkpoint the
store lacks unless an event of the job names it, and keeps at most AWAITING_UPLOAD_AT_MOST of
them beyond the last K; once the store takes puts again, the last K checkpoints are listed
(the ones in between passed over) and the ranks are told. (Both backends.)"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, cast

import pytest
from sqlalchemy import select

from ampfleet.core.artifacts import ArtifactStore, StoredObject, get_store
from ampfleet.core.db import session_scope
from ampfleet.core.models import Artifact
from ampfleet.core.settings import get_settings
from ampfleet.core.states import JobState
from ampfleet.workers import stored_checkpoints
from ampfleet.workers.rundir import RecordReader
from ampfleet.workers.stored_checkpoints import Stored
from ampfleet.workers.training import checkpoint
from ampfleet.workers.uploads import ArtifactUploader
from tests.support.env import environment
from tests.support.factories import insert_job
from tests.support.localranks import run_ranks
from tests.support.training import train_recipe

pytestmark = pytest.mark.slow  # two runs of real ranks, about a minute each

STEPS = 10
KEEP_LAST = 2
GATE_LIMIT_S = 300.0
RUN_LIMIT_S = 300.0


class GatedStore:
    """The real store, whose puts wait until the test opens the gate."""

    def __init__(self, inner: ArtifactStore) -> None:
        self.inner = inner
        self.gate = threading.Event()

    def put_stream(self, stream: BinaryIO) -> StoredObject:
        if not self.gate.wait(timeout=GATE_LIMIT_S):
            raise TimeoutError("the test never opened the gate")
        return self.inner.put_stream(stream)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.fixture
def gated(backend: str, tmp_path: Path) -> Iterator[tuple[ArtifactUploader, GatedStore]]:
    with environment({"AMPFLEET_ARTIFACT_URL": f"file://{tmp_path / 'artifacts'}"}):
        store = GatedStore(get_store())
        uploader = ArtifactUploader(get_settings(), store=lambda: cast(ArtifactStore, store))
        uploader.start()
        try:
            yield uploader, store
        finally:
            store.gate.set()
            uploader.stop(timeout=30)


def _run(rank: int, world_size: int, out_dir: str, checkpoint_dir: str) -> dict[str, Any]:
    return train_recipe(
        rank,
        world_size,
        out_dir,
        precision="fp32",
        max_steps=STEPS,
        checkpoint_every=1,
        keep_last=KEEP_LAST,
        checkpoint_dir=checkpoint_dir,
    )


def _given_up(records: list[dict[str, Any]]) -> list[int]:
    steps = []
    for record in records:
        if record["kind"] == "event" and record["reason"] == "checkpoint_not_uploaded":
            named = re.search(r"step ([\d, ]+) on this node", record["message"])
            assert named is not None, record["message"]
            steps += [int(step) for step in named.group(1).split(", ")]
    return steps


def test_keep_last_deletes_nothing_the_store_lacks_without_saying_so(
    gated: tuple[ArtifactUploader, GatedStore], tmp_path: Path
) -> None:
    uploader, store = gated
    job_id = insert_job(state=JobState.RUNNING, attempt=1)
    key = (job_id, 1)
    folder = get_settings().checkpoints_dir / job_id
    uploader.restore(job_id)  # as before every launch: tells the ranks the store has none
    out = tmp_path / "run"
    out.mkdir()
    failures: list[BaseException] = []

    def ranks() -> None:
        try:
            run_ranks(_run, 2, str(out), str(folder))
        except BaseException as exc:
            failures.append(exc)

    trainer = threading.Thread(target=ranks)
    trainer.start()
    # What the supervisor does with rank 0's records: each artifact to the uploader.
    reader, records = RecordReader(out / "events.jsonl"), []
    deadline = time.monotonic() + RUN_LIMIT_S
    while True:
        running = trainer.is_alive()
        new = reader.read_new() if (out / "events.jsonl").exists() else []
        records += new
        uploader.submit(key, [r for r in new if r["kind"] == "artifact"], [folder])
        if not running:
            break
        assert time.monotonic() < deadline, "the ranks did not finish"
        time.sleep(0.05)
    trainer.join()
    assert failures == []

    published = [
        r["step"] for r in records if r["kind"] == "artifact" and r["artifact_kind"] == "checkpoint"
    ]
    assert published == list(range(1, STEPS + 1))
    local = checkpoint.steps_available(folder)
    given_up = _given_up(records)
    # The store took nothing in: every checkpoint deleted is one an event gave up.
    assert sorted(set(published) - set(local)) == given_up
    assert len(local) == KEEP_LAST + checkpoint.AWAITING_UPLOAD_AT_MOST
    assert local[-KEEP_LAST:] == published[-KEEP_LAST:]
    assert given_up  # more checkpoints than a node keeps waiting: some had to go

    store.gate.set()  # the store catches up
    deadline = time.monotonic() + RUN_LIMIT_S
    while not uploader.settled(key):
        assert time.monotonic() < deadline, "the uploads did not settle"
        time.sleep(0.05)
    with session_scope() as session:
        listed = session.scalars(
            select(Artifact.step).where(Artifact.job_id == job_id).order_by(Artifact.step)
        ).all()
    # The last K, each exportable; not the ones in between one by one.
    assert listed == published[-KEEP_LAST:]
    assert stored_checkpoints.read(folder) == Stored(newest_step=STEPS)
