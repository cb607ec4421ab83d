"""Submit -> first step of a built-in recipe on an idle embedded node: ranks started by
torchrun (as before), by the local launcher (fresh interpreters, no torchrun) and forked
from the node's warm launcher, 1 and 2 ranks, in the same run.

    python -m bench.start [--rounds 5]

Three one-node embedded fleets of real processes, one per `AMPFLEET_RANK_LAUNCHER`, run
side by side; each round submits to each in turn (so a burst of load hits all alike), one
job at a time, and before the warm fleet's submit waits until its warm launcher has
finished its imports (an idle node). Measured from the client: the POST to the first
metric point (`digits`, logged every step: the first step's loss, as stored), and the
attempt's `start_phases` event: where the start went, phase by phase. Medians over the
rounds, and the ratios against torchrun.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from tests.support.factories import job_spec
from tests.support.fleet import Fleet, running_fleet, start_phases, warm_launcher_ready

LAUNCHERS = ("torchrun", "local", "warm")
PHASES = ("launch", "interpreter", "imports", "rendezvous", "model build", "first step")


def submit_to_first_metric(
    fleet: Fleet, spec: dict[str, Any], timeout_s: float = 300
) -> tuple[dict[str, Any], float]:
    """The job submitted, and the seconds from its POST to its first stored metric point
    (polled every 20 ms, for at most `timeout_s`)."""
    started = time.perf_counter()
    job = fleet.submit(spec)
    while not fleet.http.get(f"/v1/jobs/{job['id']}/metrics").json()["series"]:
        if time.perf_counter() - started > timeout_s:
            raise TimeoutError(f"job {job['id']}: no metric within {timeout_s:g} s")
        time.sleep(0.02)
    return job, time.perf_counter() - started


def to_first_metric(fleet: Fleet, procs: int) -> tuple[float, dict[str, float]]:
    if fleet.env.get("AMPFLEET_RANK_LAUNCHER") == "warm":
        fleet.wait_until(lambda: warm_launcher_ready(fleet), timeout=120, what="warm launcher")
    spec = job_spec(stop={"max_steps": 3}, log_every_steps=1, resources={"procs_per_node": procs})
    job, seconds = submit_to_first_metric(fleet, spec)
    fleet.wait_for_state(job["id"], {"SUCCEEDED"}, timeout=300)
    (phases,) = start_phases(fleet, job["id"])
    return seconds, phases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    totals: dict[tuple[str, int], list[float]] = {}
    phases: dict[tuple[str, int], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        fleets = {
            launcher: stack.enter_context(
                running_fleet(
                    Path(tmp) / launcher,
                    "embedded",
                    extra_env={"AMPFLEET_RANK_LAUNCHER": launcher},
                )
            )
            for launcher in LAUNCHERS
        }
        for fleet in fleets.values():  # the page cache, and each fleet's first start
            to_first_metric(fleet, 1)
        for round_ in range(args.rounds):
            for procs in (1, 2):
                for launcher, fleet in fleets.items():
                    seconds, spent = to_first_metric(fleet, procs)
                    totals.setdefault((launcher, procs), []).append(seconds)
                    phases.setdefault((launcher, procs), []).append(spent)
                line = ", ".join(f"{n} {totals[(n, procs)][-1]:.2f} s" for n in LAUNCHERS)
                print(f"round {round_ + 1}, {procs} rank(s): {line}", flush=True)
    median = statistics.median
    print(f"\nsubmit -> first metric, median of {args.rounds} rounds (embedded node, digits):")
    print(
        f"  {'ranks':>5} {'launcher':>9} {'total s':>8} {'vs torchrun':>12} | "
        + " ".join(f"{p:>11}" for p in PHASES)
    )
    for procs in (1, 2):
        baseline = median(totals[("torchrun", procs)])
        for launcher in LAUNCHERS:
            total = median(totals[(launcher, procs)])
            runs = phases[(launcher, procs)]
            by_phase = [median(run.get(name, 0.0) for run in runs) for name in PHASES]
            print(
                f"  {procs:>5} {launcher:>9} {total:8.2f} {total / baseline:11.2f}x | "
                + " ".join(f"{s:11.2f}" for s in by_phase)
            )


if __name__ == "__main__":
    main()
