from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.filesystem import FileSystemWriter

from ampfleet.workers import rundir, stored_checkpoints
from ampfleet.workers.ingest import AttemptFeed
from ampfleet.workers.rundir import RecordReader, RecordWriter, RunDir
from ampfleet.workers.training import checkpoint


def test_reader_leaves_partial_lines_for_later(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    reader = RecordReader(path)
    assert reader.read_new() == []
    path.write_text('{"kind": "finished"}\n{"kind": "rewound", "step": 1')
    assert [r["kind"] for r in reader.read_new()] == ["finished"]
    with path.open("a") as file:
        file.write("}\n")
    assert [r["kind"] for r in reader.read_new()] == ["rewound"]


def test_reader_reads_again_what_was_not_committed(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text('{"kind": "finished"}\n')
    reader = RecordReader(path)
    assert [r["kind"] for r in reader.read_new()] == ["finished"]
    reader.rollback()  # the transaction that stored it failed
    with path.open("a") as file:
        file.write('{"kind": "rewound", "step": 1}\n')
    assert [r["kind"] for r in reader.read_new()] == ["finished", "rewound"]
    assert reader.read_new() == []  # within one pass, reading continues
    reader.commit()
    reader.rollback()
    assert reader.read_new() == []


def test_committed_offsets_survive_in_the_folder(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path)
    run_dir.logs_dir.mkdir()
    run_dir.rank_log(1, "stderr").write_text("one\ntwo\n")
    run_dir.events_file.write_text('{"kind": "finished"}\n')
    feed = AttemptFeed(run_dir)
    assert len(feed.records.read_new()) == 1
    assert len(feed.new_log_lines()) == 2
    feed.commit()
    with run_dir.rank_log(1, "stderr").open("a") as log:
        log.write("three\n")
    later = AttemptFeed(run_dir)  # say, the next attempt's agent, after this one died
    assert later.records.read_new() == []
    assert later.new_log_lines() == [(1, "stderr", b"three")]


def test_writer_flushes_on_close(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    writer = RecordWriter(path, flush_s=3600)
    writer.write("metrics", step=1, values={"loss": 1.0})
    writer.close()
    assert RecordReader(path).read_new()[0]["values"] == {"loss": 1.0}


@pytest.fixture
def one_rank(tmp_path: Path) -> Iterator[None]:
    """A one-rank gloo process group: DCP saves and loads collectively."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'init'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _saved(manager: checkpoint.CheckpointManager, step: int, model: torch.nn.Module) -> None:
    manager.save(step, {"model": model.state_dict()}, {"setup": {"world_size": 1}})
    manager.wait()


def test_checkpoints_are_atomic_pruned_and_reload(tmp_path: Path, one_rank: None) -> None:
    model = torch.nn.Linear(3, 2)
    published: list[int] = []
    manager = checkpoint.CheckpointManager(
        tmp_path / "ckpt",
        rank=0,
        keep_last=2,
        on_published=lambda _p, step, _m: published.append(step),
    )
    for step in (10, 20, 30):
        _saved(manager, step, model)
    manager.close()
    assert published == [10, 20, 30]
    assert checkpoint.steps_available(tmp_path / "ckpt") == [20, 30]
    assert not list((tmp_path / "ckpt").glob(".*"))
    latest = checkpoint.latest(tmp_path / "ckpt")
    assert latest is not None
    assert checkpoint.read_meta(latest)["step"] == 30
    fresh = torch.nn.Linear(3, 2)
    state = {"model": fresh.state_dict()}
    checkpoint.load(latest, state)
    assert torch.equal(state["model"]["weight"], model.weight)


def test_keep_last_spares_what_the_store_lacks_and_says_what_it_gives_up(
    tmp_path: Path, one_rank: None
) -> None:
    """Where the agent says what the store lists (stored.json), keep-last-K keeps every
    checkpoint newer than that, up to AWAITING_UPLOAD_AT_MOST beyond the last K; one it
    deletes past that is handed to `on_given_up` (an event); once the store lists a step,
    the checkpoints up to it go as keep-last-K says. (Without the file: keep-last-K, above.)"""
    model, folder = torch.nn.Linear(3, 2), tmp_path / "ckpt"
    folder.mkdir()
    stored_checkpoints.tell_ranks(folder, None)  # the agent, before the launch
    given_up: list[tuple[list[int], int | None]] = []
    manager = checkpoint.CheckpointManager(
        folder,
        rank=0,
        keep_last=2,
        on_given_up=lambda steps, stored: given_up.append((steps, stored.newest_step)),
    )
    assert checkpoint.AWAITING_UPLOAD_AT_MOST == 4
    for step in range(1, 7):  # the last 2, and 4 waiting for the store
        _saved(manager, step, model)
    assert checkpoint.steps_available(folder) == [1, 2, 3, 4, 5, 6]
    assert given_up == []
    _saved(manager, 7, model)  # one too many: the newest waiting one beyond the last K goes
    assert checkpoint.steps_available(folder) == [1, 2, 3, 4, 6, 7]
    assert given_up == [([5], None)]

    stored_checkpoints.tell_ranks(folder, 3)  # the store listed step 3
    _saved(manager, 8, model)
    assert checkpoint.steps_available(folder) == [4, 6, 7, 8]
    stored_checkpoints.tell_ranks(folder, 8)
    _saved(manager, 9, model)
    manager.close()
    assert checkpoint.steps_available(folder) == [8, 9]
    assert given_up == [([5], None)]


def test_a_failed_write_leaves_the_previous_checkpoint(tmp_path: Path, one_rank: None) -> None:
    model = torch.nn.Linear(3, 2)

    class FailingWriter(FileSystemWriter):
        def write_data(self, plan, planner):  # type: ignore[no-untyped-def]
            raise OSError("disk vanished")

    manager = checkpoint.CheckpointManager(tmp_path, rank=0, keep_last=3)
    _saved(manager, 1, model)
    manager.storage_writer = FailingWriter
    with pytest.raises(CheckpointException):  # carries each rank's OSError
        _saved(manager, 2, model)
    assert checkpoint.steps_available(tmp_path) == [1]
    checkpoint.CheckpointManager(tmp_path, rank=0, keep_last=3)  # the next attempt
    assert not list(tmp_path.glob(".ckpt-*"))  # cleaned the partial folder


class Evil:
    """Any class: a checkpoint holding one must not be unpickled."""


def test_pickled_objects_are_refused(tmp_path: Path) -> None:
    torch.save({"torch": torch.get_rng_state(), "evil": Evil()}, checkpoint.rng_path(tmp_path, 0))
    with pytest.raises(Exception, match=r"[Ww]eights only"):
        checkpoint.restore_rng(tmp_path, 0)


def test_writer_flushes_between_steps_what_waited_its_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last record of a logging interval has no later write to carry it out."""
    path = tmp_path / "events.jsonl"
    writer = RecordWriter(path, flush_s=60)
    writer.write("metrics", step=1, values={"val_accuracy": 0.5})
    writer.flush_if_due()
    assert RecordReader(path).read_new() == []  # not due yet
    later = time.monotonic() + 61
    monkeypatch.setattr(rundir.time, "monotonic", lambda: later)
    writer.flush_if_due()
    assert [r["step"] for r in RecordReader(path).read_new()] == [1]
    writer.close()
