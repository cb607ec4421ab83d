"""Each rank's heartbeat from inside the training loop: the phase it entered, at which step,
and when.

A rank stores one fixed-size record into a small memory-mapped file of its run folder at
every phase boundary (data, forward, backward, each gradient bucket handed to the
AllReduce, optimizer, report, evaluation, checkpoint): a copy
into shared memory, no system call, so it costs nothing measurable on every step. The node
agent reads its ranks' files. A rank stuck in a collective that never returns stops beating,
and so do the ranks that wait for it in the next one: the attempt is hung when no rank has
beaten for the job's hang timeout, and the phases they were last seen entering say which
rank is furthest behind (the one the others wait for), and where.

The record is written under a sequence number (odd while it is written), so a reader never
takes half of one write for a beat.
"""

from __future__ import annotations

import mmap
import os
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ampfleet.workers import beneath

_SEQUENCE = struct.Struct("<Q")
_BODY = struct.Struct("<dq16s")  # wall time, step, phase
SIZE = _SEQUENCE.size + _BODY.size
FILE_PREFIX = "heartbeat-rank"
PHASES = ("data", "forward", "backward", "allreduce", "optimizer", "report", "stop_check")
"""The order of a step's phases; the run's own (evaluation, checkpoint) come after them."""


@dataclass(frozen=True)
class Beat:
    rank: int
    time: float
    """time.time() as the rank entered the phase."""
    step: int
    phase: str


class Heartbeat:
    """The writing side, one per rank."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            os.ftruncate(fd, SIZE)
            self._map = mmap.mmap(fd, SIZE)
        finally:
            os.close(fd)
        self._sequence = 0

    def beat(self, step: int, phase: str) -> None:
        self._sequence += 1
        self._map[: _SEQUENCE.size] = _SEQUENCE.pack(self._sequence * 2 - 1)
        self._map[_SEQUENCE.size :] = _BODY.pack(self._clock(), step, phase.encode()[:16])
        self._map[: _SEQUENCE.size] = _SEQUENCE.pack(self._sequence * 2)

    def close(self) -> None:
        self._map.close()


def heartbeat_file(folder: Path, rank: int) -> Path:
    return folder / f"{FILE_PREFIX}{rank}"


def read_beats(folder: Path) -> list[Beat]:
    """The last beat of each rank with a heartbeat file in `folder` that has beaten.

    The folder is the ranks': each file is read beneath it with pread (beneath.py), never
    mapped, since a rank that truncates a file the agent has mapped would kill the agent
    with SIGBUS."""
    beats = []
    try:
        names = beneath.list_files(folder)
    except OSError:
        return []
    for name in names:
        rank = name.removeprefix(FILE_PREFIX)
        if name.startswith(FILE_PREFIX) and rank.isdigit() and len(rank) < 8:
            beat = _read(folder, name, int(rank))
            if beat is not None:
                beats.append(beat)
    return beats


def _read(folder: Path, name: str, rank: int, tries: int = 5) -> Beat | None:
    for _ in range(tries):
        try:  # two reads that agree on an even sequence: no write was under way between
            first = beneath.read_bytes(folder, name, 0, SIZE)
            second = beneath.read_bytes(folder, name, 0, _SEQUENCE.size)
        except OSError:  # gone, or not a regular file
            return None
        if len(first) < SIZE:
            return None  # not (yet) its full size
        (before,) = _SEQUENCE.unpack(first[: _SEQUENCE.size])
        (after,) = _SEQUENCE.unpack(second)
        if before == 0:
            return None  # created, never beaten
        if before == after and before % 2 == 0:
            wall, step, phase = _BODY.unpack(first[_SEQUENCE.size : SIZE])
            return Beat(rank, wall, step, phase.rstrip(b"\0").decode(errors="replace"))
    return None  # written to on every try: it is beating


def furthest_behind_first(beats: list[Beat]) -> list[Beat]:
    """By how far each rank got: step, then phase within it, then when."""
    order = {phase: index for index, phase in enumerate(PHASES)}
    return sorted(beats, key=lambda b: (b.step, order.get(b.phase, len(PHASES)), b.time))


def describe(beats: list[Beat], now: float) -> str:
    """Each rank's last beat, the rank furthest behind first."""
    return "; ".join(
        f"rank {b.rank} last entered {b.phase} at step {b.step}, {now - b.time:.0f}s ago"
        for b in furthest_behind_first(beats)
    )
