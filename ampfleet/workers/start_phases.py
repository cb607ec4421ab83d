"""Where an attempt's start goes, from the node agent's launch to the first optimizer step.

Accelerators idle while ranks start, so the start is measured phase by phase and published:
rank 0 notes the wall-clock time each phase ended (`StartClock`), writes them in one
`start_phases` record after its first step, and the node agent, which knows when it
launched the attempt, turns them into the `start_phases` event the job page shows
(`describe`). The phases, in order:

    launch       the agent's launch -> the rank's process exists (cold: the launcher's
                 interpreter, torchrun's import of torch, its store, the rank's spawn;
                 warm: the request to a warm launcher and the fork; in a warm sandbox,
                 binding the attempt's folders into it first)
    interpreter  -> the rank's entry point runs (Python's start, the entry's own imports)
    imports      -> torch and the training stack are imported
    rendezvous   -> the process group is joined
    model_build  -> the recipe is built, the model wrapped, a checkpoint restored
    first_step   -> the first optimizer step is done

Wall-clock times, because they cross processes (agent, launcher, rank) on one node. Standard
library only: the rank's entry imports it before torch.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

PHASES = ("launch", "interpreter", "imports", "rendezvous", "model_build", "first_step")
PHASE_PATTERN = "^(" + "|".join(PHASES) + ")$"
"""A phase's name as a record may give it (workers/records.py)."""


def process_started_at() -> float:
    """When this process was created (fork or spawn), in wall-clock seconds: its age from
    /proc (in clock ticks since boot) subtracted from now."""
    with open("/proc/self/stat", "rb") as stat:
        # The command name (field 2) may hold spaces: fields are counted after its ")".
        fields = stat.read().rpartition(b")")[2].split()
    started_ticks = int(fields[19])  # field 22 of stat(5)
    with open("/proc/uptime", "rb") as uptime:
        up_s = float(uptime.read().split()[0])
    age = up_s - started_ticks / os.sysconf("SC_CLK_TCK")
    return time.time() - max(age, 0.0)


@dataclass
class StartClock:
    """Rank-side: the end of each start phase, noted once, in order."""

    warm: bool
    ends: dict[str, float] = field(default_factory=dict)

    @classmethod
    def at_entry(cls, *, warm: bool) -> StartClock:
        """Called as the rank's entry point begins: the launch ended when the process was
        created, the interpreter phase now."""
        clock = cls(warm)
        clock.ends["launch"] = process_started_at()
        clock.mark("interpreter")
        return clock

    def mark(self, phase: str) -> None:
        """`phase` ended now (again: the first time counts)."""
        self.ends.setdefault(phase, time.time())

    def record(self) -> dict[str, object]:
        """The `start_phases` record's fields."""
        return {"warm": self.warm, "ends": dict(self.ends)}


def durations(ends: dict[str, float], launched_at: float | None) -> dict[str, float]:
    """Seconds per phase, in order; the launch only where the agent knows when it launched.
    A phase whose end is missing or earlier than its start's (clocks a rank made up) is
    left out, and the next one counts from the last known end."""
    spent: dict[str, float] = {}
    previous = launched_at
    for phase in PHASES:
        end = ends.get(phase)
        if end is None or (previous is not None and end < previous):
            continue
        if previous is not None:
            spent[phase] = end - previous
        previous = end
    return spent


@dataclass(frozen=True)
class StartPath:
    """How the node agent started the ranks, beyond what they say themselves (warm or
    cold): what the `start_phases` event adds."""

    sandbox: bool = False
    """Bundled code in a sandbox: a warm start's was made before the attempt came
    (workers/warm_sandbox.py)."""
    why_cold: str | None = None
    """Why the ranks did not start warm (torchrun, no warm launcher ready, ...)."""


def describe(
    ends: dict[str, float], warm: bool, launched_at: float | None, path: StartPath | None = None
) -> str:
    """The `start_phases` event's message: how the ranks started, the total and each phase,
    for people; a cold start ends with why it was not warm, where the agent said."""
    path = path or StartPath()
    spent = durations(ends, launched_at)
    parts = ", ".join(f"{phase.replace('_', ' ')} {s:.2f} s" for phase, s in spent.items())
    total = sum(spent.values())
    how = "cold start"
    if warm:
        how = "warm start in a sandbox made before it" if path.sandbox else "warm start"
    why = f"; not warm: {path.why_cold}" if path.why_cold and not warm else ""
    return f"{how}, {total:.2f} s to the first step: {parts}{why}"
