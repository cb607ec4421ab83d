"""Pydantic I/O models of a job's artifacts and checkpoints."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

ArtifactKind = Literal["checkpoint", "model", "output", "profile", "sample"]


class ArtifactOut(BaseModel):
    kind: ArtifactKind
    name: str = Field(description="Unique in the job: `model.safetensors`, `outputs/<path>`, ...")
    size: int = Field(description="Bytes.")
    sha256: str = Field(description="Of the bytes; the download's ETag.")
    step: int | None = Field(description="The optimizer step it was made at.")
    attempt: int
    content_type: str
    created_at: datetime
    details: dict[str, Any] = Field(description="What else is known: lineage, dtype, ...")
    download_url: str = Field(description="Path of the download, relative to the API's root.")


class ArtifactList(BaseModel):
    items: list[ArtifactOut] = Field(description="Oldest first.")


class CheckpointOut(BaseModel):
    step: int
    attempt: int
    created_at: datetime
    size: int = Field(description="Bytes of the checkpoint's one object (a tar of its files).")
    sha256: str
    lineage: dict[str, Any] = Field(
        description="The setup it was made under: precision, AllReduce dtype, world size, ..."
    )
    metrics: dict[str, float] = Field(
        description="What the job reported at this step (the loss where the step was a "
        "logged one, the validation metrics where it was an evaluation's)."
    )
    download_url: str
    export_url: str = Field(
        description="POST here to export this checkpoint as a model (a job of 0 steps that "
        "starts from it: for a fine-tune, a Hugging Face folder)."
    )


class CheckpointList(BaseModel):
    items: list[CheckpointOut] = Field(description="By step, oldest first.")


class SampleOut(BaseModel):
    step: int = Field(description="The evaluation's step.")
    attempt: int
    created_at: datetime
    text: str = Field(description="What the model generated: each prompt and its completion.")
    truncated: bool = Field(description="The text is longer than shown: download it whole.")
    download_url: str


class SampleList(BaseModel):
    items: list[SampleOut] = Field(description="By step, oldest first.")
