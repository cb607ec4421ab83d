"""One scheduling pass in memory: how fast placement decides, and how well it packs.

    python -m bench.scheduler_memory                 # 10,000 queued jobs, 1,000 nodes x 8
    python -m bench.scheduler_memory --jobs 2000 --nodes 200
    python -m bench.scheduler_memory --racks 50      # nodes in racks too (topology.py)
    python -m bench.scheduler_memory --runs 15 --cpu-time   # on a loaded machine

The fleet starts empty and the queue asks for several times its slots, so a pass fills it and
explains every job left waiting. Speed is placements per second of `schedule` (and all jobs
decided per second); packing is slots placed against the ideal, min(slots requested, fleet
slots), side by side in the same run. Figures are medians over `--runs` passes on the same
input; `make_scenario` is deterministic per seed and is shared with the database benchmark.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from ampfleet.scheduler.placement import JobRequest, NodeView, schedule

POOLS = (  # pool, GPU model, GPU memory, share of the fleet
    ("a100", "NVIDIA A100-SXM4-80GB", 81920, 0.5),
    ("h100", "NVIDIA H100 80GB HBM3", 81559, 0.3),
    ("l4", "NVIDIA L4", 23034, 0.2),
)
EXPLICIT_SHAPES = ((1, 1), (1, 2), (1, 4), (1, 8), (2, 1), (2, 2), (2, 4), (4, 1), (4, 2), (8, 1))
PROJECTS = 20


def make_scenario(
    jobs: int = 10_000, nodes: int = 1_000, slots: int = 8, seed: int = 0, racks: int = 0
) -> tuple[list[JobRequest], list[NodeView]]:
    """A queue of gangs of 1-8 slots (half fixed shapes, half totals; 3 priorities; 20
    projects; a third with GPU type, memory or zone constraints) and an idle CUDA fleet in
    three pools over two zones; with `racks`, also in that many racks of consecutive nodes."""
    rng = random.Random(seed)
    fleet = []
    for i in range(nodes):
        pool, model, memory, _ = _pool_of(i / nodes)
        fleet.append(
            NodeView(
                id=f"node-{i:05d}",
                accelerator="cuda",
                gpu_model=model,
                gpu_memory_mb=memory,
                labels={
                    "pool": pool,
                    "zone": "eu-1" if i % 2 else "us-1",
                    **({"rack": f"r{i * racks // nodes:03d}"} if racks else {}),
                },
                slots=slots,
                free=slots,
            )
        )
    queue = []
    for i in range(jobs):
        constraint = rng.random()
        if rng.random() < 0.5:
            count, per_node = rng.choice(EXPLICIT_SHAPES)
            shape: dict[str, Any] = {
                "nodes": count,
                "procs_per_node": per_node,
                "total_procs": None,
            }
        else:
            shape = {"nodes": None, "procs_per_node": None, "total_procs": rng.randint(1, slots)}
        queue.append(
            JobRequest(
                id=f"job-{i:07d}",
                project=f"project-{rng.randrange(PROJECTS):02d}",
                priority=rng.choices((0, 1, 2), weights=(3, 5, 2))[0],
                accelerator="cuda" if constraint < 0.5 else "any",
                gpu_type="a100" if constraint < 0.15 else "H100" if constraint < 0.25 else None,
                min_gpu_memory_mb=40_000 if 0.25 <= constraint < 0.3 else None,
                selector={"zone": "eu-1"} if 0.3 <= constraint < 0.35 else {},
                **shape,
            )
        )
    return queue, fleet


def _pool_of(fraction: float) -> tuple[str, str, int, float]:
    edge = 0.0
    for pool in POOLS:
        edge += pool[3]
        if fraction < edge:
            return pool
    return POOLS[-1]


def run_in_memory(
    jobs: int = 10_000,
    nodes: int = 1_000,
    slots: int = 8,
    seed: int = 0,
    racks: int = 0,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, float]:
    """One timed pass over `make_scenario(...)`: its speed and its packing against the ideal."""
    queue, fleet = make_scenario(jobs, nodes, slots, seed, racks)
    started = clock()
    decision = schedule(queue, fleet, [], {}, {}, now=0.0)
    seconds = clock() - started
    placed_slots = sum(s for p in decision.placements for _, s in p.allocations)
    requested = sum(job.slots for job in queue)
    ideal = min(requested, sum(node.slots for node in fleet))
    return {
        "seconds": seconds,
        "placements": len(decision.placements),
        "placements_per_s": len(decision.placements) / seconds,
        "jobs_per_s": jobs / seconds,
        "placed_slots": placed_slots,
        "ideal_slots": ideal,
        "packing": placed_slots / ideal if ideal else 1.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--racks", type=int, default=0)
    parser.add_argument(
        "--cpu-time",
        action="store_true",
        help="time passes in this process's CPU time, which other work on a shared machine "
        "moves less than the wall clock",
    )
    args = parser.parse_args()
    clock = time.process_time if args.cpu_time else time.perf_counter
    runs = [
        run_in_memory(args.jobs, args.nodes, args.slots, args.seed, args.racks, clock)
        for _ in range(args.runs)
    ]
    median = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    racked = f" in {args.racks} racks" if args.racks else ""
    print(
        f"{args.jobs} queued jobs, {args.nodes} nodes x {args.slots} slots{racked}, "
        f"median of {args.runs} passes"
    )
    fastest = min(run["seconds"] for run in runs)
    print(
        f"  pass time          {median['seconds'] * 1000:8.1f} ms (fastest "
        f"{fastest * 1000:.1f} ms; {'CPU' if args.cpu_time else 'wall'} time)"
    )
    print(f"  placements         {median['placements']:8.0f}")
    print(f"  placements/s       {median['placements_per_s']:8.0f}")
    print(f"  jobs decided/s     {median['jobs_per_s']:8.0f}")
    print(
        f"  packing            {median['packing']:8.1%}  "
        f"({median['placed_slots']:.0f} of ideal {median['ideal_slots']:.0f} slots)"
    )


if __name__ == "__main__":
    main()
