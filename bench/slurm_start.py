"""Submit -> first step of a digits job on the Slurm pool against the same job on an idle
ampfleet worker node, in the same run.

    python -m bench.slurm_start [--rounds 3]

Three fleets of real processes side by side, taking turns job by job (so a burst of load
hits all alike): one whose only pool is a real Slurm cluster (tests/support/slurm.py: two
slurmd on this machine, slurmrestd on a unix socket), and two with one ampfleet worker node
each, one with the node's default warm launcher (what an idle node gives) and one with the
cold `local` launcher, which is the launcher the Slurm path gets too (a batch job holds no
warm launcher), so that pair differs by Slurm alone. The job is one rank, 3 steps, logged
every step.

Measured from the client: the POST to the first stored metric point. The Slurm figure is
broken down by the events' times and slurmctld's log (millisecond timestamps):

    ampfleet      POST -> the `slurm_submitted` event (admission, the scheduling pass, the
                  REST submit); on a node, POST -> STARTING (the pass, the start message,
                  the worker's claim)
    slurm queue   slurmctld's submit RPC -> its `Allocate`/`Started` of the job: PENDING
                  in Slurm's queue until a scheduling pass (main or backfill) starts it
    batch+srun    -> STARTING: the batch script launched by slurmd, `srun` creating the
                  step, `ampfleet run-attempt`'s interpreter and imports, its claim
    ranks         the attempt's `start_phases` event, phase by phase, as on any node

Medians over the rounds, and the ratios against the warm node.
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.start import submit_to_first_metric
from tests.support.factories import job_spec
from tests.support.fleet import Fleet, running_fleet, start_phases, warm_launcher_ready
from tests.support.slurm import (
    POOL,
    SlurmCluster,
    slurm_fleet_env,
    slurm_problem,
    start_cluster,
    write_node_settings,
)

PHASES = ("launch", "interpreter", "imports", "rendezvous", "model build", "first step")
POOLS = ("node warm", "node local", "slurm")
STAGES = ("ampfleet", "slurm queue", "batch+srun")
LOG_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)\] (.*)$")


def event_time(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(event["time"].replace("Z", "+00:00")).timestamp()


def slurmctld_times(cluster: SlurmCluster, slurm_id: int) -> tuple[float, float] | None:
    """When slurmctld took the submit RPC and when it allocated the job, from its log (local
    time, as the controller writes it); None when either line is missing."""
    submitted = started = None
    log = (cluster.root / "slurmctld.log").read_text(errors="replace")
    for line in log.splitlines():
        found = LOG_TIME.match(line)
        if not found:
            continue
        text = found.group(2)
        if f"JobId={slurm_id} " not in text + " ":
            continue
        at = datetime.fromisoformat(found.group(1)).timestamp()
        if submitted is None and "submit_batch_job" in text:
            submitted = at
        if started is None and ("Allocate" in text or "Started" in text):
            started = at
    return (submitted, started) if submitted is not None and started is not None else None


def one_job(
    name: str, fleet: Fleet, cluster: SlurmCluster
) -> tuple[float, dict[str, float], dict[str, float]]:
    if name == "node warm":
        fleet.wait_until(lambda: warm_launcher_ready(fleet), timeout=120, what="warm launcher")
    resources: dict[str, Any] = {"nodes": 1, "procs_per_node": 1}
    if name == "slurm":
        resources["selector"] = {"pool": POOL}
    spec = job_spec(stop={"max_steps": 3}, log_every_steps=1, resources=resources)
    posted_wall = time.time()
    job, seconds = submit_to_first_metric(fleet, spec)
    fleet.wait_for_state(job["id"], {"SUCCEEDED"}, timeout=300)
    (phases,) = start_phases(fleet, job["id"])
    events = fleet.events(job["id"])
    starting = next(event_time(e) for e in events if e["to_state"] == "STARTING")
    stages: dict[str, float] = {}
    if name != "slurm":
        stages["ampfleet"] = starting - posted_wall
        return seconds, stages, phases
    submitted = next(e for e in events if e["reason"] == "slurm_submitted")
    stages["ampfleet"] = event_time(submitted) - posted_wall
    slurm_id = int(re.search(r"Slurm job (\d+)", submitted["message"]).group(1))  # type: ignore[union-attr]
    times = slurmctld_times(cluster, slurm_id)
    if times is not None:
        stages["slurm queue"] = times[1] - times[0]
        stages["batch+srun"] = starting - times[1]
    return seconds, stages, phases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    problem = slurm_problem()
    if problem:
        raise SystemExit(f"no Slurm cluster here: {problem}")
    totals: dict[str, list[float]] = {name: [] for name in POOLS}
    stages: dict[str, list[dict[str, float]]] = {name: [] for name in POOLS}
    phases: dict[str, list[dict[str, float]]] = {name: [] for name in POOLS}
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        cluster = stack.enter_context(start_cluster(2))
        fleets = {
            "node warm": stack.enter_context(running_fleet(Path(tmp) / "warm")),
            "node local": stack.enter_context(
                running_fleet(Path(tmp) / "local", extra_env={"AMPFLEET_RANK_LAUNCHER": "local"})
            ),
            "slurm": stack.enter_context(
                running_fleet(
                    Path(tmp) / "slurm",
                    nodes=(),
                    extra_env={
                        **slurm_fleet_env(cluster, Path(tmp)),
                        "AMPFLEET_RANK_LAUNCHER": "local",
                    },
                )
            ),
        }
        slurm_env = fleets["slurm"].env
        write_node_settings(Path(slurm_env["AMPFLEET_SLURM_NODE_SETTINGS_FILE"]), slurm_env)
        fleets["slurm"].wait_until(
            lambda: any(
                n["labels"].get("pool") == POOL
                for n in fleets["slurm"].http.get("/v1/nodes").json()["items"]
            ),
            timeout=120,
            what="the Slurm pool's nodes",
        )
        for name, fleet in fleets.items():  # the page cache, and each fleet's first start
            one_job(name, fleet, cluster)
        for round_ in range(args.rounds):
            for name, fleet in fleets.items():
                seconds, staged, spent = one_job(name, fleet, cluster)
                totals[name].append(seconds)
                stages[name].append(staged)
                phases[name].append(spent)
            line = ", ".join(f"{n} {totals[n][-1]:.2f} s" for n in POOLS)
            print(f"round {round_ + 1}: {line}", flush=True)
    median = statistics.median
    print(f"\nsubmit -> first metric, median of {args.rounds} rounds (digits, 1 rank, idle):")
    print(
        f"  {'pool':>10} {'total s':>8} {'vs warm':>8} | "
        + " ".join(f"{s:>11}" for s in STAGES)
        + " | "
        + " ".join(f"{p:>11}" for p in PHASES)
    )
    baseline = median(totals["node warm"])
    for name in POOLS:
        total = median(totals[name])
        staged = [
            f"{median(run[s] for run in stages[name]):11.2f}"
            if all(s in run for run in stages[name])
            else f"{'-':>11}"
            for s in STAGES
        ]
        by_phase = [median(run.get(p, 0.0) for run in phases[name]) for p in PHASES]
        print(
            f"  {name:>10} {total:8.2f} {total / baseline:7.2f}x | "
            + " ".join(staged)
            + " | "
            + " ".join(f"{s:11.2f}" for s in by_phase)
        )
    slurm_runs = ", ".join(f"{s:.2f}" for s in totals["slurm"])
    print(f"\nper round, slurm: {slurm_runs} s")


if __name__ == "__main__":
    main()
