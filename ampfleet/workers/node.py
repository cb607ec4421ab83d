"""What this node offers the fleet: accelerator, slots, GPU model and memory."""

from __future__ import annotations

from dataclasses import dataclass

from ampfleet.core.settings import Settings


@dataclass(frozen=True)
class Capacity:
    accelerator: str
    slots: int
    gpu_model: str | None
    gpu_memory_mb: int | None


def detect_capacity(settings: Settings) -> Capacity:
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        props = torch.cuda.get_device_properties(0)
        return Capacity(
            accelerator="cuda",
            slots=torch.cuda.device_count(),
            gpu_model=props.name,
            gpu_memory_mb=props.total_memory // 2**20,
        )
    return Capacity(
        accelerator="cpu", slots=settings.node_cpu_slots, gpu_model=None, gpu_memory_mb=None
    )
