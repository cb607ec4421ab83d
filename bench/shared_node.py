"""Two one-rank jobs at once on one two-slot CPU node: the step time of each, with every rank
computing on all the node's cores (the baseline: what a rank got before, the node's cores
divided among its own job's ranks only) and with each on its slot's share (ours).

    python -m bench.shared_node --rounds 3

An embedded fleet per configuration; the baseline's worker sets OMP_NUM_THREADS to the
node's core count, which the node passes on as an operator's choice. Each round submits two
digits jobs (hidden 128, batch 256, 200 steps) together and waits for both; the figure is the
median over both jobs' logged `step_time_s` of every round.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from ampfleet.workers.launch import threads_per_rank
from tests.support.factories import job_spec
from tests.support.fleet import Fleet, running_fleet

SPEC = job_spec(
    resources={"procs_per_node": 1},
    precision="fp32",
    allreduce_dtype="fp32",
    stop={"max_steps": 200},
    eval_every_steps=50,
    log_every_steps=5,
    hyperparameters={"hidden": 128, "batch_size": 256},
)


def step_times(fleet: Fleet, rounds: int) -> list[float]:
    times: list[float] = []
    for _ in range(rounds):
        jobs = [fleet.submit(SPEC)["id"] for _ in range(2)]
        for job_id in jobs:
            fleet.wait_for_state(job_id, {"SUCCEEDED"}, timeout=600)
            series = fleet.http.get(
                f"/v1/jobs/{job_id}/metrics", params={"names": "step_time_s"}
            ).json()["series"]
            times += [point["value"] for point in series[0]["points"]]
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    cores = threads_per_rank(1)  # all the cores the worker may run on
    medians = {}
    for name, extra in (("all cores", {"OMP_NUM_THREADS": str(cores)}), ("slot share", {})):
        with (
            tempfile.TemporaryDirectory() as tmp,
            running_fleet(Path(tmp), "embedded", cpu_slots=2, extra_env=extra) as fleet,
        ):
            medians[name] = statistics.median(step_times(fleet, args.rounds))
        print(f"{name:>10}: step time median {medians[name] * 1000:.1f} ms", flush=True)
    ratio = medians["all cores"] / medians["slot share"]
    print(f"{cores} cores, 2 slots, 2 jobs at once: slot share is {ratio:.1f}x faster per step")


if __name__ == "__main__":
    main()
