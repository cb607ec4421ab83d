"""A node's GPUs split between attempts: each gets indices of its own, back when it ends; the
sandbox binds the driver's shared device nodes and only the attempt's per-GPU ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from ampfleet.core.sandbox import sandboxed
from ampfleet.workers.gpus import GpuPool, device_nodes

PRESENT = [
    "/dev/nvidia-caps",
    "/dev/nvidia-modeset",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia0",
    "/dev/nvidia1",
    "/dev/nvidia2",
    "/dev/nvidia3",
    "/dev/nvidiactl",
]


def test_attempts_get_distinct_gpus_and_give_them_back() -> None:
    pool = GpuPool(4)
    first, second = pool.take(2), pool.take(2)
    assert (first, second) == ((0, 1), (2, 3))
    with pytest.raises(RuntimeError, match="1 GPUs wanted, 0 free"):
        pool.take(1)
    pool.give_back(first)
    assert pool.take(1) == (0,)


def test_the_sandbox_binds_only_the_attempts_own_gpus() -> None:
    chosen = [str(p) for p in device_nodes((1, 3), PRESENT)]
    assert chosen == [
        "/dev/nvidia-caps",
        "/dev/nvidia-modeset",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidia1",
        "/dev/nvidia3",
        "/dev/nvidiactl",
    ]
    assert [str(p) for p in device_nodes(None, PRESENT)] == PRESENT
    command = sandboxed(
        ["true"],
        data_dir=Path("/var/lib/ampfleet"),
        writable=[Path("/var/lib/ampfleet/runs/x")],
        readable=[],
        devices=device_nodes((1,), PRESENT),
    )
    bound = [command[i + 1] for i, arg in enumerate(command) if arg == "--dev-bind"]
    assert "/dev/nvidia1" in bound
    assert "/dev/nvidia0" not in bound
    assert "/dev/nvidiactl" in bound
