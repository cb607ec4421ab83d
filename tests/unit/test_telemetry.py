"""The node agent's per-rank telemetry, read from real processes: this test process stands
in for the launcher, and its children with RANK in their environment for the ranks."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from ampfleet.workers.telemetry import RankTelemetry
from ampfleet.workers.training.entry import STACKS_SIGNAL

HELD_MB = 200
# Bounded in time: each child ends on its own after 60 s if the test never stops it.
BUSY = "import time\nend = time.time() + 60\nwhile time.time() < end:\n    pass\n"
HOLDING = (
    f"import time\nheld = b'x' * ({HELD_MB} << 20)\n"  # written, so resident
    "print('ready', flush=True)\ntime.sleep(60)\n"
)


def _child(code: str, rank: str | None) -> subprocess.Popen[str]:
    env = {**os.environ}
    env.pop("RANK", None)
    if rank is not None:
        env["RANK"] = rank
    return subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True
    )


@pytest.fixture
def ranks() -> Iterator[list[subprocess.Popen[str]]]:
    children = [_child(BUSY, "0"), _child(HOLDING, "1"), _child(HOLDING, None)]
    try:
        for child in children[1:]:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "ready"
        yield children
    finally:
        for child in children:
            child.kill()
            child.wait(timeout=10)


@pytest.mark.usefixtures("ranks")
def test_samples_cpu_and_resident_memory_of_each_rank() -> None:
    telemetry = RankTelemetry(os.getpid(), interval_s=0.0)
    telemetry.sample()
    time.sleep(1.0)  # a window for the CPU shares to differ in; nothing is timed
    values = telemetry.sample()

    # Only processes with a rank: the third child has none.
    assert set(values) == {"cpu_percent_rank0", "rss_mb_rank0", "cpu_percent_rank1", "rss_mb_rank1"}
    assert values["rss_mb_rank1"] >= HELD_MB
    assert values["rss_mb_rank1"] > values["rss_mb_rank0"]
    assert values["cpu_percent_rank0"] > values["cpu_percent_rank1"]
    assert values["cpu_percent_rank1"] >= 0.0


def test_the_ranks_are_the_children_with_a_rank(ranks: list[subprocess.Popen[str]]) -> None:
    pids = RankTelemetry(os.getpid(), interval_s=0.0).rank_pids()
    assert sorted(pids) == sorted([ranks[0].pid, ranks[1].pid])


@pytest.mark.usefixtures("ranks")
def test_one_sample_per_step_and_interval() -> None:
    every_step = RankTelemetry(os.getpid(), interval_s=0.0)
    first = every_step.take(3)
    assert {name for step, name, _ in first if step == 3} >= {"rss_mb_rank0", "rss_mb_rank1"}
    assert every_step.take(3) == []  # the series already holds step 3
    assert every_step.take(4) != []

    seldom = RankTelemetry(os.getpid(), interval_s=3600.0)
    assert seldom.take(1) != []
    assert seldom.take(2) == []  # not due for an hour


def test_a_rank_caught_exiting_gives_no_reading(
    ranks: list[subprocess.Popen[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rank read as it exits (its memory released, its RANK still readable) reads 0 RSS:
    no sample of it, not a 0 MB point. The moment cannot be hit on purpose in a real
    process, so rank 1's reading is made to return what the kernel then shows."""
    exiting = ranks[1].pid
    read = psutil.Process.memory_info

    @functools.wraps(read)  # keeps what `oneshot` calls on it
    def memory_info(process: psutil.Process) -> Any:
        info = read(process)
        return info._replace(rss=0) if process.pid == exiting else info

    monkeypatch.setattr(psutil.Process, "memory_info", memory_info)
    values = RankTelemetry(os.getpid(), interval_s=0.0).sample()
    assert set(values) == {"cpu_percent_rank0", "rss_mb_rank0"}


def test_no_ranks_no_points() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=30)
    assert RankTelemetry(gone.pid, interval_s=0.0).take(1) == []


def test_a_stalled_rank_dumps_its_stacks_on_the_signal(tmp_path: Path) -> None:
    """As entry.py registers it: the dump answers while the rank blocks in a C call."""
    stderr = tmp_path / "rank-0.stderr"
    blocked = (
        "import faulthandler, time\n"
        "from ampfleet.workers.training.entry import STACKS_SIGNAL\n"
        "faulthandler.register(STACKS_SIGNAL, all_threads=True)\n"
        "print('ready', flush=True)\ntime.sleep(60)\n"
    )
    with stderr.open("wb") as sink:
        child = subprocess.Popen(
            [sys.executable, "-c", blocked],
            env={**os.environ, "RANK": "0"},
            stdout=subprocess.PIPE,
            stderr=sink,
            text=True,
        )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        (pid,) = RankTelemetry(os.getpid(), interval_s=0.0).rank_pids()
        os.kill(pid, STACKS_SIGNAL)
        for _ in range(100):  # bounded: 10 s at most
            if "most recent call first" in stderr.read_text():
                break
            time.sleep(0.1)
        assert "most recent call first" in stderr.read_text()
        assert child.poll() is None  # the dump does not stop the rank
    finally:
        child.kill()
        child.wait(timeout=10)
