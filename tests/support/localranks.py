"""Run a function on N local gloo ranks (separate processes) and collect what each returns.

For benchmarks and tests that exercise the real training pieces on real process groups
without the platform around them; jobs themselves are launched by torchrun (workers/launch.py).
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile
import traceback
from collections.abc import Callable
from datetime import timedelta
from multiprocessing import reduction
from pathlib import Path
from typing import Any, Literal

import torch
import torch.distributed as dist
from torch.multiprocessing import start_processes  # type: ignore[attr-defined]

from ampfleet.workers.launch import threads_per_rank
from ampfleet.workers.training.group import leave_process_group


class RankFailedError(RuntimeError):
    """Every rank that failed, with its error: the first to fail may have taken its peers
    down with it, so the cause is in one of them, not always rank 0's."""

    def __init__(self, failures: dict[int, str]) -> None:
        super().__init__("\n".join(f"rank {r} failed: {e}" for r, e in failures.items()))
        self.failures = failures


RANK_PRELOAD = [
    "torch",
    "torch.distributed",
    "torch.distributed.checkpoint",
    "torch.distributed.fsdp",
    "torch.nn.parallel",
    "tests.support.localranks",
    "tests.support.training",
]
"""What the fork server imports before it forks a rank: the heavy imports of the tests'
rank functions, so that a rank imports its test module's own lines only."""


class CallersFd:
    """One of the caller's file descriptors, for a rank: sent with the rank's arguments
    (SCM_RIGHTS to the fork server, inherited by a spawned rank); a rank receives it as a
    descriptor number of its own."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self) -> tuple[Callable[[Any], int], tuple[Any]]:
        # Called while the rank's process is being started: DupFd needs that moment.
        return _received_fd, (reduction.DupFd(self.fd),)


def _received_fd(duplicate: Any) -> int:
    return int(duplicate.detach())


def _worker(  # start_processes passes its arguments positionally
    rank: int,
    world_size: int,
    init_file: str,
    out_dir: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    timeout_s: float,
    environ: dict[str, str],
    output: tuple[int, int],
) -> None:
    # A rank forked from the server would write where the server's stdout and stderr went,
    # and see the server's environment: those of the first call in the test process. It
    # takes the caller's of now, as a spawned rank does (pytest's capture, a test's
    # variables). Its folder and sys.path come with multiprocessing's preparation data.
    for inherited, standard in zip(output, (1, 2), strict=True):
        os.dup2(inherited, standard)
        os.close(inherited)
    os.environ.clear()
    os.environ.update(environ)
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
    torch.set_num_threads(threads_per_rank(world_size))
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
    fn: Callable[..., Any],
    world_size: int = 2,
    *args: Any,
    timeout_s: float = 120.0,
    start_method: Literal["forkserver", "spawn"] = "forkserver",
) -> list[Any]:
    """`fn(rank, world_size, *args)` on each rank; returns the results in rank order.
    `start_method`: "forkserver" forks each rank from one server per test process that
    imported torch once (RANK_PRELOAD); "spawn" starts each as a new interpreter that imports
    torch and the test's module itself, 2-3 CPU-seconds a rank (`python -m
    bench.rank_start`)."""
    if start_method == "forkserver":  # takes effect when the server starts: the first call
        multiprocessing.get_context("forkserver").set_forkserver_preload(RANK_PRELOAD)
    with tempfile.TemporaryDirectory() as tmp:
        init_file = str(Path(tmp) / "init")
        start_processes(
            _worker,
            args=(
                world_size,
                init_file,
                tmp,
                fn,
                args,
                timeout_s,
                dict(os.environ),
                (CallersFd(1), CallersFd(2)),
            ),
            nprocs=world_size,
            join=True,
            start_method=start_method,
        )
        return collect(tmp, world_size)
