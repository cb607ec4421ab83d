from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ampfleet.workers.ingest import AttemptFeed
from ampfleet.workers.rundir import RecordReader, RecordWriter, RunDir
from ampfleet.workers.training import checkpoint


def test_reader_leaves_partial_lines_for_later(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    reader = RecordReader(path)
    assert reader.read_new() == []
    path.write_text('{"kind": "a"}\n{"kind": "b"')
    assert [r["kind"] for r in reader.read_new()] == ["a"]
    with path.open("a") as file:
        file.write("}\n")
    assert [r["kind"] for r in reader.read_new()] == ["b"]


def test_reader_reads_again_what_was_not_committed(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text('{"kind": "a"}\n')
    reader = RecordReader(path)
    assert [r["kind"] for r in reader.read_new()] == ["a"]
    reader.rollback()  # the transaction that stored it failed
    with path.open("a") as file:
        file.write('{"kind": "b"}\n')
    assert [r["kind"] for r in reader.read_new()] == ["a", "b"]
    assert reader.read_new() == []  # within one pass, reading continues
    reader.commit()
    reader.rollback()
    assert reader.read_new() == []


def test_committed_offsets_survive_in_the_folder(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path)
    run_dir.logs_dir.mkdir()
    run_dir.rank_log(1, "stderr").write_text("one\ntwo\n")
    run_dir.events_file.write_text('{"kind": "a"}\n')
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


def test_checkpoints_are_atomic_pruned_and_weights_only(tmp_path: Path) -> None:
    model = torch.nn.Linear(3, 2)
    for step in (10, 20, 30):
        checkpoint.save(
            tmp_path, step, {"model": model.state_dict(), "setup": {}}, rank=0, keep_last=2
        )
    assert checkpoint.steps_available(tmp_path) == [20, 30]
    assert not list(tmp_path.glob(".*.tmp"))
    state = checkpoint.load(checkpoint.latest(tmp_path))  # type: ignore[arg-type]
    assert state["step"] == 30
    assert torch.equal(state["model"]["weight"], model.weight)


def test_a_crash_mid_write_leaves_the_previous_checkpoint(tmp_path: Path, monkeypatch) -> None:
    checkpoint.save(tmp_path, 1, {"value": torch.ones(2)}, rank=0, keep_last=3)

    def crash(*_args, **_kwargs):
        raise OSError("disk vanished")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(OSError, match="disk vanished"):
        checkpoint.save(tmp_path, 2, {"value": torch.zeros(2)}, rank=0, keep_last=3)
    assert checkpoint.steps_available(tmp_path) == [1]
    assert torch.equal(checkpoint.load(checkpoint.latest(tmp_path))["value"], torch.ones(2))  # type: ignore[arg-type]


class Evil:
    """Any class: a checkpoint holding one must not be unpickled."""


def test_pickled_objects_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "ckpt-000000001.pt"
    torch.save({"format": 1, "step": 1, "evil": Evil()}, path)
    with pytest.raises(Exception, match=r"[Ww]eights only"):
        checkpoint.load(path)
