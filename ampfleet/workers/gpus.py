"""Which of this node's GPUs an attempt gets: the scheduler counts a node's free slots, the
node agent picks the devices. Each attempt gets its own indices (CUDA_VISIBLE_DEVICES for
its ranks, so two jobs on one node never share a GPU) and, in the sandbox, only the device
nodes of those GPUs besides the driver's shared control nodes."""

from __future__ import annotations

import glob
import re
import threading
from pathlib import Path

_PER_GPU = re.compile(r"^/dev/nvidia(\d+)$")


class GpuPool:
    def __init__(self, count: int) -> None:
        self._free = set(range(count))
        self._lock = threading.Lock()

    def take(self, wanted: int) -> tuple[int, ...]:
        """The lowest `wanted` free indices; the scheduler never places more ranks than the
        node has free slots, so fewer means a slot was double-booked: raised, not hidden."""
        with self._lock:
            if wanted > len(self._free):
                raise RuntimeError(f"{wanted} GPUs wanted, {len(self._free)} free on this node")
            taken = tuple(sorted(self._free)[:wanted])
            self._free -= set(taken)
            return taken

    def give_back(self, indices: tuple[int, ...]) -> None:
        with self._lock:
            self._free |= set(indices)


def device_nodes(indices: tuple[int, ...] | None, present: list[str] | None = None) -> list[Path]:
    """The NVIDIA device nodes a sandbox binds: every shared one (nvidiactl, nvidia-uvm,
    nvidia-modeset, nvidia-caps, ...) and, of the per-GPU ones (/dev/nvidia<N>), those of
    `indices` only (all of them where `indices` is None: a node without GPU slots)."""
    found = sorted(glob.glob("/dev/nvidia*")) if present is None else present
    chosen = []
    for device in found:
        match = _PER_GPU.match(device)
        if match is None or indices is None or int(match.group(1)) in indices:
            chosen.append(Path(device))
    return chosen
