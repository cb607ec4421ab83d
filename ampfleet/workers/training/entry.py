"""One rank's process, launched by torchrun: `python -m ampfleet.workers.training.entry RUN_DIR`.

Reads job.json and resolves the recipe (imports the bundle's entrypoint, validates the
hyperparameters) first, before torch is imported and before the ranks meet: a bundle that
fails to import, or hyperparameters its model refuses, fail this rank within a second or two
of its start, not after torch's import and the rendezvous (or, with a peer that never came,
the rendezvous timeout). Recipes import without torch (the API loads installed ones), so
this costs nothing. Only then training/rank.py joins the process group and trains.
Whatever goes wrong is written to failure-rank<r>.json in words a user can act on.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from ampfleet.core.recipes import RecipeDefinition, get_recipe
from ampfleet.core.spec import CodeSpec, InitFrom, JobSpec
from ampfleet.workers.parent_death import die_with_parent
from ampfleet.workers.rank_memory import out_of_memory
from ampfleet.workers.rank_output import capture_output
from ampfleet.workers.rundir import PEER_LOST, RunDir
from ampfleet.workers.start_phases import StartClock
from ampfleet.workers.training.bundled import bundled_recipe


class StoredCode(CodeSpec):
    """`code` as stored: the API adds the bundle's sha256; a local run (`ampfleet run-local`)
    names its folder instead of a bundle."""

    bundle: str
    sha256: str | None = None


class StoredInitFrom(InitFrom):
    """`init_from` as stored: the API resolved it to one listed checkpoint."""

    step: int
    sha256: str
    artifact: str
    name: str


class StoredSpec(JobSpec):
    """The spec as the API stored it in the job file: every default resolved, and what the
    API resolved for the node beside it."""

    code: StoredCode | None = None
    init_from: StoredInitFrom | None = None
    hyperparameters: dict[str, Any] = Field(default_factory=dict)
    """An installed recipe's, with every default it has filled in, however many."""
    inputs: dict[str, Any] = Field(default_factory=dict)
    """As the API resolved them; this node's paths are the job file's own `inputs`."""


@dataclass(frozen=True)
class ResolvedJob:
    """The job file read, its recipe imported and its hyperparameters validated."""

    job: dict[str, Any]
    spec: StoredSpec
    recipe: RecipeDefinition
    hyperparameters: BaseModel
    inputs: dict[str, Path]
    """The spec's inputs where this node fetched them, by name."""


def resolve_job(run_dir: RunDir) -> ResolvedJob:
    """Rank-local and torch-free: what every rank would otherwise find out only after the
    rendezvous, each on its own."""
    job: dict[str, Any] = json.loads(run_dir.job_file.read_text())
    spec = StoredSpec.model_validate(job["spec"])
    if spec.code is not None and spec.code.entrypoint is None:
        raise RuntimeError("a job with code.command runs under the script entry (script.py)")
    recipe = (
        bundled_recipe(Path(job["code_dir"]), spec.code.entrypoint)
        if spec.code is not None and spec.code.entrypoint is not None
        else get_recipe(spec.recipe or "")  # a valid spec names one or the other
    )
    # A bundled recipe's hyperparameters meet their model here first (the API never saw it).
    hyperparameters = recipe.hyperparameters.model_validate(spec.hyperparameters)
    inputs = {name: Path(path) for name, path in job.get("inputs", {}).items()}
    # Data a recipe cannot train on (a folder that is no model, a line without its field)
    # fails here, torch-free, not once every rank has met and loaded the model.
    recipe.check_inputs(hyperparameters, inputs)
    return ResolvedJob(job, spec, recipe, hyperparameters, inputs)


def write_failure(run_dir: RunDir, rank: int, exc: BaseException) -> None:
    memory = out_of_memory(exc)
    kind = "OutOfMemory" if memory else PEER_LOST if peer_lost(exc) else type(exc).__name__
    run_dir.write_failure(
        rank, kind, memory or str(exc), "".join(traceback.format_exception(exc)[-3:])
    )


PEER_LOST_ERRORS = ("DistNetworkError", "DistStoreError")
"""torch.distributed's errors of a connection to a peer or the store, by name (the ranks'
torch may differ from the one this was written against)."""
GLOO_TRANSPORT = "gloo/transport/"
"""In gloo's errors of a pair's connection (reset or closed by the peer), where it threw."""


def peer_lost(exc: BaseException) -> bool:
    """Whether `exc`, or what caused it, is a peer's connection lost: its node or ranks died
    (the rank that died first reports its own cause, if it can). A user's own connection
    errors (an HTTP download, say) are not: only torch.distributed's are."""
    seen: BaseException | None = exc
    for _ in range(10):
        if seen is None:
            return False
        if type(seen).__name__ in PEER_LOST_ERRORS or GLOO_TRANSPORT in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def failed(run_dir: RunDir, rank: int, exc: BaseException) -> int:
    write_failure(run_dir, rank, exc)
    traceback.print_exc()
    return 1


PREEMPT = threading.Event()
STACKS_SIGNAL = signal.SIGUSR2


def watch_for_preemption() -> None:
    """The node agent preempts with SIGUSR1 (the launcher passes it on): checkpoint at the
    next step, then exit. Installed first thing, before the agent can send it."""
    signal.signal(signal.SIGUSR1, lambda _signum, _frame: PREEMPT.set())


def main(argv: list[str], *, warm: bool = False) -> int:
    """`warm`: forked by a warm launcher (workers/warm_launcher.py) with torch and the
    training stack imported, rather than started as an interpreter of its own."""
    clock = StartClock.at_entry(warm=warm)
    die_with_parent()
    watch_for_preemption()
    run_dir = RunDir(Path(argv[1]))
    rank = int(os.environ["RANK"])
    capture_output(run_dir, rank)
    # A stalled attempt's ranks are asked for their stacks before they are stopped: the
    # dump runs in the signal handler itself, so it works while a collective blocks.
    faulthandler.register(STACKS_SIGNAL, all_threads=True)
    try:
        resolved = resolve_job(run_dir)
    except Exception as exc:  # no torch, no process group yet: nothing to tear down
        return failed(run_dir, rank, exc)
    # torch from here on: imported only for a recipe that resolved.
    from ampfleet.workers.training.group import leave_process_group
    from ampfleet.workers.training.rank import RankPlace, train

    clock.mark("imports")

    place = RankPlace(
        rank=rank,
        world_size=int(os.environ["WORLD_SIZE"]),
        local_rank=int(os.environ["LOCAL_RANK"]),
        ranks_on_node=int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
    )
    completed = False
    try:
        train(
            run_dir,
            resolved,
            place,
            started=time.monotonic(),
            stop_requested=PREEMPT.is_set,
            clock=clock,
        )
        completed = True
        return 0
    except Exception as exc:
        return failed(run_dir, rank, exc)
    finally:
        leave_process_group(completed=completed)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
