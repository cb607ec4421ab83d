from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class FindingOut(BaseModel):
    rule: str = Field(description="Stable identifier of the rule that fired.")
    severity: Literal["high", "medium", "info"]
    title: str
    evidence: str = Field(description="The figures the rule read.")
    advice: str = Field(description="What to change, in the job's own fields where one exists.")


class BreakdownOut(BaseModel):
    steps: int = Field(description="Reported steps the means cover (0: none reported yet).")
    to_step: int
    step_time_s: float | None
    shares: dict[str, float] = Field(
        description="Each phase's mean share of a step: data, forward, backward, optimizer, "
        "allreduce_exposed, comm_exposed."
    )
    mfu: float | None
    cpu_percent_by_rank: dict[int, float]


class DiagnosisOut(BaseModel):
    job_id: str
    state: str
    breakdown: BreakdownOut
    findings: list[FindingOut] = Field(description="Most severe first; empty when healthy.")
