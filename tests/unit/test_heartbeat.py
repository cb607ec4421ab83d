"""Ranks' heartbeats: what one wrote is what the agent reads, never half a write."""

from __future__ import annotations

import multiprocessing
import time
from multiprocessing.synchronize import Event as EventType
from pathlib import Path

from ampfleet.workers import heartbeat
from ampfleet.workers.heartbeat import (
    Beat,
    Heartbeat,
    describe,
    furthest_behind_first,
    heartbeat_file,
    read_beats,
)


def test_the_last_beat_of_each_rank_is_read(tmp_path: Path) -> None:
    clock = iter([100.0, 101.0, 102.5])
    zero = Heartbeat(heartbeat_file(tmp_path, 0), clock=lambda: next(clock))
    one = Heartbeat(heartbeat_file(tmp_path, 1), clock=lambda: next(clock))
    assert read_beats(tmp_path) == []  # created, never beaten
    zero.beat(41, "backward")
    one.beat(41, "optimizer")
    zero.beat(42, "forward")
    beats = read_beats(tmp_path)
    assert [(b.rank, b.time, b.step, b.phase) for b in beats] == [
        (0, 102.5, 42, "forward"),
        (1, 101.0, 41, "optimizer"),
    ]
    assert describe(beats, now=110.0) == (
        "rank 1 last entered optimizer at step 41, 9s ago; "
        "rank 0 last entered forward at step 42, 8s ago"
    )
    zero.close()
    one.close()


def test_the_rank_furthest_behind_comes_first_whenever_it_beat() -> None:
    """A slow rank enters the forward of a step after its peer entered that step's backward
    (where it waits for the slow one): behind, though it beat later."""
    peer = Beat(rank=0, time=100.0, step=189, phase="backward")
    slow = Beat(rank=1, time=103.0, step=189, phase="forward")
    done = Beat(rank=2, time=99.0, step=189, phase="checkpoint")
    assert furthest_behind_first([peer, done, slow]) == [slow, peer, done]
    # Both in a step's backward: the one that handed its gradients over waits, and says so.
    waiting = Beat(rank=0, time=100.5, step=189, phase="allreduce")
    computing = Beat(rank=1, time=103.0, step=189, phase="backward")
    assert furthest_behind_first([waiting, computing]) == [computing, waiting]


class _SlowWriter(Heartbeat):
    """Writes a beat as Heartbeat does, between the same two sequence numbers, but its body
    in two halves with a pause between them: a reader that ignored the sequence would see a
    step with the previous beat's phase, often rather than once in a blue moon."""

    def beat(self, step: int, phase: str) -> None:
        self._sequence += 1
        body = heartbeat._BODY.pack(time.time(), step, phase.encode()[:16])
        start, half = heartbeat._SEQUENCE.size, heartbeat._BODY.size - 16
        self._map[:start] = heartbeat._SEQUENCE.pack(self._sequence * 2 - 1)
        self._map[start : start + half] = body[:half]
        time.sleep(0.0002)
        self._map[start + half :] = body[half:]
        self._map[:start] = heartbeat._SEQUENCE.pack(self._sequence * 2)
        time.sleep(0.0002)  # and as long between beats, when a reader can read it whole


def _beat_fast(path: Path, stop: EventType) -> None:
    writer = _SlowWriter(path)
    step = 0
    while not stop.is_set():
        step += 1
        writer.beat(step, "backward" if step % 2 else "evaluate")
    writer.close()


def test_a_reader_never_sees_half_a_beat(tmp_path: Path) -> None:
    """The writer is another process, as a rank is: it writes while the reader reads, on
    the other core (a thread would take turns with the reader under the GIL)."""
    context = multiprocessing.get_context("fork")
    stop = context.Event()
    writer = context.Process(target=_beat_fast, args=(heartbeat_file(tmp_path, 3), stop))
    writer.start()
    try:
        seen: list[Beat] = []
        for _ in range(100_000):  # until 20 beats were read, each read taking microseconds
            seen += read_beats(tmp_path)
            if len({b.step for b in seen}) >= 20:
                break
    finally:
        stop.set()
        writer.join(timeout=30)
    assert len({b.step for b in seen}) >= 20  # read while it was writing
    # Odd steps were written with backward, even ones with evaluate: a torn read mixes them.
    assert [b for b in seen if b.phase != ("backward" if b.step % 2 else "evaluate")] == []


def test_stray_and_short_files_are_not_beats(tmp_path: Path) -> None:
    (tmp_path / "heartbeat-rankx").write_bytes(b"\1" * 40)
    (tmp_path / "heartbeat-rank2").write_bytes(b"\1\2")
    assert read_beats(tmp_path) == []
