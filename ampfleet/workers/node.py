"""What this node offers the fleet: accelerator, slots, GPU model and memory.

The memory it registers is what its ranks' model states live in: RAM on a CPU node (the
container's limit when that is lower), GPU memory on a GPU node. Admission sizes jobs
against each slot's share of it, and a CPU node runs every rank under that share.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ampfleet.core.memory import MB, slot_memory_mb
from ampfleet.core.settings import Settings

# A memory cgroup's limit as a container sees its own: cgroup v2, then v1.
CGROUP_LIMIT_FILES = (
    Path("/sys/fs/cgroup/memory.max"),
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
)


@dataclass(frozen=True)
class Capacity:
    accelerator: str
    slots: int
    gpu_model: str | None
    gpu_memory_mb: int | None
    memory_mb: int | None = None
    native_bf16: bool = False
    """The node's devices compute in bf16 natively (CUDA 8.0+, or AVX512-BF16/AMX)."""

    @property
    def rank_memory_limit_mb(self) -> int | None:
        """Host memory one rank may use: its slot's share on a CPU node. A GPU node's
        registered memory is the GPUs', which the driver already bounds per device."""
        if self.accelerator != "cpu":
            return None
        return slot_memory_mb(self.memory_mb, self.slots)


def detect_capacity(settings: Settings) -> Capacity:
    import torch

    from ampfleet.workers.hardware_precision import cpu_supports_bf16

    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        devices = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]
        return Capacity(
            accelerator="cuda",
            slots=len(devices),
            gpu_model=devices[0].name,
            gpu_memory_mb=devices[0].total_memory // MB,
            memory_mb=settings.node_memory_mb or sum(d.total_memory for d in devices) // MB,
            native_bf16=all(d.major >= 8 for d in devices),
        )
    return Capacity(
        accelerator="cpu",
        slots=settings.node_cpu_slots,
        gpu_model=None,
        gpu_memory_mb=None,
        memory_mb=settings.node_memory_mb or host_memory_mb(),
        native_bf16=cpu_supports_bf16(),
    )


def host_memory_mb() -> int | None:
    """Total RAM, or the memory cgroup's limit where that is lower; None if unreadable."""
    try:
        meminfo = Path("/proc/meminfo").read_text()
    except OSError:
        return None
    total_kb = next(
        (int(line.split()[1]) for line in meminfo.splitlines() if line.startswith("MemTotal:")),
        None,
    )
    if total_kb is None:
        return None
    limits = [total_kb * 1024]
    for path in CGROUP_LIMIT_FILES:
        try:
            value = path.read_text().strip()
        except OSError:
            continue
        if value.isdigit():  # "max" (v2) means no limit
            limits.append(int(value))
    return min(limits) // MB
