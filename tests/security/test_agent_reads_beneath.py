"""The node agent, outside the sandbox and often root, touches the ranks' folders only
beneath them: a link out, a link in a folder of the path, a FIFO, a planted temporary name,
a forged path in a record, each is refused, never followed or blocked on."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from ampfleet.workers import beneath
from ampfleet.workers.heartbeat import read_beats
from ampfleet.workers.rundir import LineTail, RunDir


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "outside" / "admin.key"
    path.parent.mkdir()
    path.write_text("the admin key\n")
    return path


@pytest.fixture
def run(tmp_path: Path) -> RunDir:
    run_dir = RunDir(tmp_path / "run")
    run_dir.logs_dir.mkdir(parents=True)
    return run_dir


def test_a_link_out_of_the_folder_is_not_followed(run: RunDir, secret: Path) -> None:
    os.symlink(secret, run.path / "forged")
    with pytest.raises(beneath.RefusedPathError):
        beneath.read_bytes(run.path, "forged", 0, 100)
    os.symlink("../outside", run.path / "up")
    with pytest.raises(beneath.RefusedPathError):
        beneath.read_bytes(run.path, "up/admin.key", 0, 100)


def test_a_folder_of_the_path_replaced_by_a_link_is_not_followed(run: RunDir, secret: Path) -> None:
    os.rmdir(run.logs_dir)
    os.symlink(secret.parent, run.logs_dir)
    (secret.parent / "rank-0.stdout").write_text("a line of someone else's\n")
    assert run.rank_logs() == []
    tail = LineTail(run.rank_log(0, "stdout"), root=run.path)
    assert tail.read_lines() == []


def test_dot_dot_and_absolute_names_are_refused(run: RunDir) -> None:
    for name in ("../x", "/etc/shadow", "a/../../x", "", "./x"):
        with pytest.raises(beneath.RefusedPathError):
            beneath.read_bytes(run.path, name, 0, 10)


def test_a_fifo_is_refused_without_blocking(run: RunDir) -> None:
    os.mkfifo(run.path / "events.jsonl")
    result: list[object] = []

    def read() -> None:
        try:
            beneath.read_bytes(run.path, "events.jsonl", 0, 10)
        except OSError as exc:
            result.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=60)
    assert not reader.is_alive(), "opening a FIFO blocked the agent"
    assert isinstance(result[0], beneath.RefusedPathError)


def test_a_planted_temporary_name_is_replaced_not_written_through(
    run: RunDir, secret: Path
) -> None:
    for pid_guess in range(os.getpid() - 2, os.getpid() + 3):
        os.symlink(secret, run.path / f".forwarded.json.{pid_guess}.tmp")
    os.symlink(secret, run.path / "forwarded.json")
    beneath.write_atomic(run.path, "forwarded.json", b"{}")
    assert secret.read_text() == "the admin key\n"
    assert (run.path / "forwarded.json").read_bytes() == b"{}"
    assert not (run.path / "forwarded.json").is_symlink()


def test_heartbeat_files_that_are_links_or_fifos_are_skipped(run: RunDir, secret: Path) -> None:
    os.symlink(secret, run.path / "heartbeat-rank0")
    os.mkfifo(run.path / "heartbeat-rank1")
    assert read_beats(run.path) == []


def test_a_path_a_rank_names_must_lie_in_its_own_folders(run: RunDir, tmp_path: Path) -> None:
    checkpoints = tmp_path / "checkpoints" / "job_a"
    roots = [run.path, checkpoints]
    assert beneath.place(str(run.path / "outputs" / "x.bin"), roots)[0] == run.path
    assert beneath.place(str(checkpoints / "ckpt-000000001" / "a"), roots)[0] == checkpoints
    for named in (
        "/etc/shadow",
        str(tmp_path / "checkpoints" / "job_b" / "x"),  # another job's
        str(run.path / ".." / "node-1" / "x"),
        str(run.path),  # the folder itself, not a file in it
        "relative/x",
    ):
        with pytest.raises(beneath.RefusedPathError):
            beneath.place(named, roots)
