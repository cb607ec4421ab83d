"""Goodput as the API shows it, on a job and on a project (core/goodput.py counts it)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from ampfleet.core.goodput import Goodput


class GoodputOut(BaseModel):
    """Slot-seconds (a slot is a GPU, or a CPU rank slot) held by the attempts, and where
    they went; the kinds add up to `allocated_slot_s`."""

    allocated_slot_s: float = Field(description="Held by its attempts, placed to released.")
    training_slot_s: float = Field(description="In training steps that count.")
    startup_slot_s: float = Field(
        description="Placed to the first step: launch, imports, data, rendezvous, restore."
    )
    recomputed_slot_s: float = Field(
        description="In steps computed again: past the checkpoint a restart resumed from, "
        "or thrown away by a precision fallback."
    )
    checkpoint_slot_s: float = Field(description="Training blocked on checkpoint snapshots.")
    evaluation_slot_s: float
    pruned_slot_s: float = Field(
        description="Held by a sweep's trial that its pruner stopped (all it held: the model "
        "it trained is not kept)."
    )
    other_slot_s: float = Field(
        description="The rest: an attempt's tail after its last report (killed, hung), exit."
    )
    queued_s: float = Field(
        description="Wall seconds waiting in the queue, first placement and restarts (no "
        "slot is held while waiting)."
    )
    attempts: int
    ratio: float | None = Field(description="training / allocated; null before any placement.")


def goodput_out(goodput: Goodput) -> GoodputOut:
    return GoodputOut(**goodput.as_dict())
