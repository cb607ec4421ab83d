"""Pydantic I/O models of a job's profiles."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ampfleet.api.bounds import MAX_INT
from ampfleet.core.profile_states import MAX_STEPS, ProfileState

MAX_LISTED_RANKS = 4096


class ProfileRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    steps: int = Field(
        5, ge=1, le=MAX_STEPS, description=f"Optimizer steps to capture, 1 to {MAX_STEPS}."
    )
    ranks: list[Annotated[int, Field(ge=0, le=MAX_INT)]] | None = Field(
        None,
        min_length=1,
        max_length=MAX_LISTED_RANKS,
        description="The ranks that trace (each below the job's world size); null: every rank.",
    )
    record_shapes: bool = Field(
        False, description="Record each operator's input shapes (a larger trace)."
    )

    @field_validator("ranks")
    @classmethod
    def _distinct(cls, ranks: list[int] | None) -> list[int] | None:
        if ranks is None:
            return None
        if len(set(ranks)) != len(ranks):
            raise ValueError("each rank at most once")
        return sorted(ranks)


class ProfileArtifact(BaseModel):
    name: str = Field(description="As listed in GET /v1/jobs/{id}/artifacts.")
    listed: bool = Field(description="Stored and downloadable (false while it uploads).")
    size: int | None
    sha256: str | None
    download_url: str | None


class ProfileOut(BaseModel):
    id: str
    job_id: str
    attempt: int = Field(description="The attempt asked to capture.")
    state: ProfileState = Field(
        description="requested (the ranks start it within 10 steps), capturing, uploading "
        "(the traces are being stored), done, failed or cancelled (see `reason`)."
    )
    steps: int
    ranks: list[int] | None = Field(description="The ranks that trace; null: every rank.")
    record_shapes: bool
    start_step: int | None = Field(description="The first step captured.")
    end_step: int | None = Field(description="The last step captured.")
    reason: str | None
    artifacts: list[ProfileArtifact] = Field(
        description="A trace per rank (`profiles/<id>/rank-<r>.trace.json`, Chrome trace "
        "format: ui.perfetto.dev or chrome://tracing) and `profiles/<id>/summary.json`."
    )
    summary: dict[str, Any] | None = Field(
        description="As summary.json: per rank the time by phase, the backward pass's share "
        "of the step, the top operators by self time and the compute/communication overlap."
    )
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class ProfileList(BaseModel):
    items: list[ProfileOut] = Field(description="Newest first.")
