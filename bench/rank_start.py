"""What starting a test's local gloo ranks costs (tests/support/localranks.py): each rank a
new interpreter ("spawn", the baseline) against each rank forked from one server that
imported torch once ("forkserver"), side by side.

    python -m bench.rank_start --calls 5 --runs 3

A call is `run_ranks` of a rank function that joins its group and all-reduces one tensor,
from a module that imports the training stack as the tests' rank functions do. Per run:
the calls alternate between the two ways (drift hits both alike); printed, the median
wall seconds of a call each way and its ranks' CPU seconds up to the collective, and the
fork server's start, paid once per test process, apart.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from typing import Literal

import torch
import torch.distributed as dist

import tests.support.training  # noqa: F401  # what a test's rank module imports
from tests.support.localranks import run_ranks


def joined(_rank: int, _world_size: int) -> tuple[float, float]:
    """The all-reduced value, and this rank's CPU seconds so far: a forked rank's count
    starts at its fork, a spawned one's at its interpreter's start (its imports)."""
    tensor = torch.ones(4)
    dist.all_reduce(tensor)
    used = resource.getrusage(resource.RUSAGE_SELF)
    return float(tensor[0]), used.ru_utime + used.ru_stime


def one_call(start_method: Literal["forkserver", "spawn"]) -> tuple[float, float]:
    """Wall seconds of one two-rank call, and its ranks' CPU seconds up to the collective."""
    started = time.monotonic()
    results = run_ranks(joined, 2, start_method=start_method)
    assert [value for value, _ in results] == [2.0, 2.0], results
    return time.monotonic() - started, sum(cpu for _, cpu in results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    server_wall, _ = one_call("forkserver")  # the server starts: once a process
    print(f"first forkserver call (the server's start included): {server_wall:.2f} s wall")
    ratios = []
    for run in range(args.runs):
        found: dict[Literal["forkserver", "spawn"], list[tuple[float, float]]] = {
            "spawn": [],
            "forkserver": [],
        }
        for _ in range(args.calls):
            for method, calls in found.items():
                calls.append(one_call(method))
        walls = {m: statistics.median(w for w, _ in calls) for m, calls in found.items()}
        cpus = {m: statistics.median(c for _, c in calls) for m, calls in found.items()}
        ratios.append(walls["spawn"] / walls["forkserver"])
        print(
            f"run {run + 1}: a two-rank call, median of {args.calls}: "
            f"spawn {walls['spawn']:.2f} s wall / {cpus['spawn']:.2f} CPU-s, "
            f"forkserver {walls['forkserver']:.2f} s wall / {cpus['forkserver']:.2f} CPU-s; "
            f"wall {ratios[-1]:.1f}x"
        )
    print(f"median over runs, wall: {statistics.median(ratios):.1f}x")


if __name__ == "__main__":
    main()
