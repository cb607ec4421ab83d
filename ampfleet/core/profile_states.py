"""A profile's states and bounds, for the server and the SDK alike (no database here):

    requested -> capturing -> uploading -> done
        \\            \\            \\-> failed (a file could not be stored)
         \\-> cancelled / failed (by request, or the job left RUNNING first)

Who moves a profile between them is core/profiles.py's.
"""

from __future__ import annotations

from enum import StrEnum

MAX_STEPS = 20
"""Steps one profile may capture: a trace grows with every step, and the ranks pause to write
it."""


class ProfileState(StrEnum):
    REQUESTED = "requested"
    CAPTURING = "capturing"
    UPLOADING = "uploading"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    def is_final(self) -> bool:
        return self in FINAL_STATES


OPEN_STATES = frozenset({ProfileState.REQUESTED, ProfileState.CAPTURING})
"""The ranks have it or are about to: one at a time per job (a partial unique index)."""
FINAL_STATES = frozenset({ProfileState.DONE, ProfileState.FAILED, ProfileState.CANCELLED})
