from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


class NodeOut(BaseModel):
    id: str
    accelerator: str = Field(description="`cuda` or `cpu`.")
    slots: int = Field(description="GPUs, or CPU rank slots on a node without GPUs.")
    used_slots: int
    free_slots: int
    gpu_model: str | None
    gpu_memory_mb: int | None
    memory_mb: int | None = Field(
        description="Total RAM on a CPU node, total GPU memory on a GPU node; each slot "
        "gets an equal share, which admission sizes jobs against."
    )
    labels: dict[str, str]
    state: str = Field(description="`ready` or `cordoned`.")
    state_reason: str | None = Field(
        description="Why it is cordoned: by an operator, or by the platform after attempts "
        "hung there repeatedly (AMPFLEET_CORDON_AFTER_HANGS); none when ready."
    )
    alive: bool = Field(description="Heartbeat seen within the node timeout.")
    last_heartbeat_at: datetime
    heartbeat_age_seconds: float
    registered_at: datetime


class NodeList(BaseModel):
    items: list[NodeOut]


class DrainOut(BaseModel):
    node: NodeOut
    preempted_jobs: list[str] = Field(description="Jobs asked to checkpoint and requeue.")
