"""Submit -> first step on an idle embedded node: ranks started by torchrun (as before), by
the local launcher (fresh interpreters, no torchrun) and forked from the node's warm
launcher, 1 and 2 ranks, for a built-in recipe and for the same recipe as bundled code (in
the bubblewrap sandbox: a warm start's sandbox made before the attempt came), in the same
run.

    python -m bench.start [--rounds 5] [--code built-in|bundle|both]

Three one-node embedded fleets of real processes, one per `AMPFLEET_RANK_LAUNCHER` (the warm
one with `AMPFLEET_WARM_SANDBOX=always`), run side by side; each round submits to each in
turn (so a burst of load hits all alike), one job at a time, and before the warm fleet's
submit waits until its warm launcher, or for bundled code its warm sandbox, has finished its
imports (an idle node). The bundle's recipe is `digits` itself, so what differs is only how
its code arrives and runs. Measured from the client: the POST to the first metric point
(`digits`, logged every step: the first step's loss, as stored), and the attempt's
`start_phases` event: where the start went, phase by phase. Medians over the rounds, and
the ratios against torchrun.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from tests.support.archives import zip_of
from tests.support.factories import job_spec
from tests.support.fleet import (
    Fleet,
    running_fleet,
    start_phases,
    warm_launcher_ready,
    warm_sandbox_ready,
)

LAUNCHERS = ("torchrun", "local", "warm")
CODES = ("built-in", "bundle")
PHASES = ("launch", "interpreter", "imports", "rendezvous", "model build", "first step")
BUNDLE = {
    "bench_pkg/__init__.py": b"",
    "bench_pkg/recipe.py": b"from ampfleet.recipes.digits import recipe  # digits, bundled\n",
}


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


def spec_for(procs: int, bundle: str | None) -> dict[str, Any]:
    """`digits` for 3 steps; as the bundle's code where `bundle` names one."""
    spec = job_spec(stop={"max_steps": 3}, log_every_steps=1, resources={"procs_per_node": procs})
    if bundle is not None:
        del spec["recipe"]
        spec["code"] = {"bundle": bundle, "entrypoint": "bench_pkg.recipe:recipe"}
    return spec


def to_first_metric(
    fleet: Fleet, procs: int, bundle: str | None = None
) -> tuple[float, dict[str, float]]:
    if fleet.env.get("AMPFLEET_RANK_LAUNCHER") == "warm":
        ready = warm_launcher_ready if bundle is None else warm_sandbox_ready
        fleet.wait_until(lambda: ready(fleet), timeout=120, what="the warm launcher")
    job, seconds = submit_to_first_metric(fleet, spec_for(procs, bundle))
    fleet.wait_for_state(job["id"], {"SUCCEEDED"}, timeout=300)
    (phases,) = start_phases(fleet, job["id"])
    return seconds, phases


def upload_bundle(fleet: Fleet) -> str:
    uploaded = fleet.http.post("/v1/bundles", content=zip_of(BUNDLE))
    if uploaded.status_code != 201:
        raise RuntimeError(f"the bundle was refused: {uploaded.text}")
    return str(uploaded.json()["id"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--code", default="both", help="built-in, bundle, or both")
    args = parser.parse_args()
    asked = set(CODES) if args.code == "both" else set(args.code.split(","))
    if asked - set(CODES):  # else an empty table, after a minute of set-up
        parser.error(f"--code takes built-in, bundle, or both; not {args.code!r}")
    codes = [c for c in CODES if c in asked]
    totals: dict[tuple[str, int, str], list[float]] = {}
    phases: dict[tuple[str, int, str], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        fleets = {
            launcher: stack.enter_context(
                running_fleet(
                    Path(tmp) / launcher,
                    "embedded",
                    extra_env={
                        "AMPFLEET_RANK_LAUNCHER": launcher,
                        "AMPFLEET_WARM_SANDBOX": "always",
                    },
                )
            )
            for launcher in LAUNCHERS
        }
        bundles = {name: upload_bundle(fleet) for name, fleet in fleets.items()}
        for name, fleet in fleets.items():  # the page cache, and each fleet's first start
            for code in codes:
                to_first_metric(fleet, 1, bundles[name] if code == "bundle" else None)
        for round_ in range(args.rounds):
            for code in codes:
                for procs in (1, 2):
                    for launcher, fleet in fleets.items():
                        bundle = bundles[launcher] if code == "bundle" else None
                        seconds, spent = to_first_metric(fleet, procs, bundle)
                        totals.setdefault((code, procs, launcher), []).append(seconds)
                        phases.setdefault((code, procs, launcher), []).append(spent)
                    line = ", ".join(f"{n} {totals[(code, procs, n)][-1]:.2f} s" for n in LAUNCHERS)
                    print(f"round {round_ + 1}, {code}, {procs} rank(s): {line}", flush=True)
    median = statistics.median
    print(f"\nsubmit -> first metric, median of {args.rounds} rounds (embedded node, digits):")
    print(
        f"  {'code':>8} {'ranks':>5} {'launcher':>9} {'total s':>8} {'vs torchrun':>12} | "
        + " ".join(f"{p:>11}" for p in PHASES)
    )
    for code in codes:
        for procs in (1, 2):
            baseline = median(totals[(code, procs, "torchrun")])
            for launcher in LAUNCHERS:
                total = median(totals[(code, procs, launcher)])
                runs = phases[(code, procs, launcher)]
                by_phase = [median(run.get(name, 0.0) for run in runs) for name in PHASES]
                print(
                    f"  {code:>8} {procs:>5} {launcher:>9} {total:8.2f} "
                    f"{total / baseline:11.2f}x | " + " ".join(f"{s:11.2f}" for s in by_phase)
                )


if __name__ == "__main__":
    main()
