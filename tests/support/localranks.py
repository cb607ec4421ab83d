"""Run a function on N local gloo ranks (separate processes) and collect what each returns.

For benchmarks and tests that exercise the real training pieces on real process groups
without the platform around them; jobs themselves are launched by torchrun (workers/launch.py).
"""

from __future__ import annotations

import os
import tempfile
import traceback
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.multiprocessing import spawn  # type: ignore[attr-defined]

from ampfleet.workers.training.group import leave_process_group


class RankFailedError(RuntimeError):
    """Every rank that failed, with its error: the first to fail may have taken its peers
    down with it, so the cause is in one of them, not always rank 0's."""

    def __init__(self, failures: dict[int, str]) -> None:
        super().__init__("\n".join(f"rank {r} failed: {e}" for r, e in failures.items()))
        self.failures = failures


def _worker(  # spawn passes its arguments positionally
    rank: int,
    world_size: int,
    init_file: str,
    out_dir: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    timeout_s: float,
) -> None:
    # A bounded timeout: a desynchronised collective fails instead of hanging.
    dist.init_process_group(
        "gloo",
        init_method=f"file://{init_file}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=timeout_s),
    )
    run_as_rank(rank, world_size, out_dir, fn, args)


def run_as_rank(
    rank: int, world_size: int, out_dir: str, fn: Callable[..., Any], args: tuple[Any, ...]
) -> None:
    """In a rank whose process group is up: `fn`'s result (or its error) into `out_dir`,
    for `collect`; the group is left either way."""
    # Share the cores between the ranks: oversubscribed intra-op threads spin against
    # gloo's own threads and distort every timing.
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
    try:
        result: Any = ("ok", fn(rank, world_size, *args))
    except Exception as exc:
        result = ("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    finally:
        leave_process_group(completed=result[0] == "ok")
    # torch.save + weights_only loading, not pickle: results are tensors, numbers, strings.
    torch.save(result, Path(out_dir) / f"rank{rank}.pt")


def collect(out_dir: str, world_size: int) -> list[Any]:
    """What each rank's `run_as_rank` left in `out_dir`, in rank order; RankFailedError
    naming every rank that failed."""
    outcomes = [
        torch.load(Path(out_dir) / f"rank{rank}.pt", weights_only=True)
        for rank in range(world_size)
    ]
    failures = {r: value for r, (status, value) in enumerate(outcomes) if status != "ok"}
    if failures:
        raise RankFailedError(failures)
    return [value for _status, value in outcomes]


def run_ranks(
    fn: Callable[..., Any], world_size: int = 2, *args: Any, timeout_s: float = 120.0
) -> list[Any]:
    """`fn(rank, world_size, *args)` on each rank; returns the results in rank order."""
    with tempfile.TemporaryDirectory() as tmp:
        init_file = str(Path(tmp) / "init")
        spawn(
            _worker,
            args=(world_size, init_file, tmp, fn, args, timeout_s),
            nprocs=world_size,
            join=True,
        )
        return collect(tmp, world_size)
