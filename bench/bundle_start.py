"""Submit -> RUNNING of a job that runs bundled code, beside the same recipe as a built-in,
on one idle local fleet of real processes (the embedded default), in the same run.

    python -m bench.bundle_start [--rounds 5]

Each round submits, one after another: the built-in `digits`; a bundle this node has never
seen (new bytes each round: uploaded, then fetched from the store and unpacked on the node,
and run in the bubblewrap sandbox); and that bundle again (the node's unpacked copy). The
recipe in the bundle is `digits` itself, so what differs is only how its code arrives and
runs. Times are the server's: from the submit's QUEUED event to RUNNING (ranks started and
reporting), and the upload's own time apart. Medians over the rounds, and the differences.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.support.archives import zip_of
from tests.support.factories import job_spec
from tests.support.fleet import Fleet, running_fleet

RECIPE = """
from ampfleet.recipes.digits import recipe  # round {round}: new bytes, a new bundle
"""
STEPS = 5


def to_running(fleet: Fleet, job_id: str) -> float:
    fleet.wait_for_state(job_id, {"SUCCEEDED"}, timeout=300)
    times = {e["to_state"]: datetime.fromisoformat(e["time"]) for e in fleet.events(job_id)}
    return (times["RUNNING"] - times["QUEUED"]).total_seconds()


def bundled_spec(bundle: str) -> dict[str, Any]:
    spec = job_spec(
        code={"bundle": bundle, "entrypoint": "bench_pkg.recipe:recipe"},
        stop={"max_steps": STEPS},
        resources={"procs_per_node": 1},
    )
    del spec["recipe"]
    return spec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    built_in, first, cached, uploads = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp, running_fleet(Path(tmp), "embedded") as fleet:
        fleet.submit(job_spec(stop={"max_steps": STEPS}))  # warm: imports, page cache
        for round_ in range(args.rounds):
            job = fleet.submit(job_spec(stop={"max_steps": STEPS}, resources={"procs_per_node": 1}))
            built_in.append(to_running(fleet, job["id"]))
            body = zip_of(
                {
                    "bench_pkg/__init__.py": b"",
                    "bench_pkg/recipe.py": RECIPE.format(round=round_).encode(),
                }
            )
            started = time.perf_counter()
            uploaded = fleet.http.post("/v1/bundles", content=body)
            uploads.append(time.perf_counter() - started)
            assert uploaded.status_code == 201, uploaded.text
            bundle = uploaded.json()["id"]
            first.append(to_running(fleet, fleet.submit(bundled_spec(bundle))["id"]))
            cached.append(to_running(fleet, fleet.submit(bundled_spec(bundle))["id"]))
            print(
                f"round {round_ + 1}: built-in {built_in[-1]:.2f} s, bundle first "
                f"{first[-1]:.2f} s, cached {cached[-1]:.2f} s, upload {uploads[-1] * 1000:.0f} ms"
            )
    median = statistics.median
    print(f"\nsubmit -> RUNNING, median of {args.rounds} rounds (embedded fleet, 1 rank):")
    print(f"  built-in digits           {median(built_in):6.2f} s")
    print(
        f"  bundle, first on the node {median(first):6.2f} s  "
        f"(+{median(first) - median(built_in):.2f} s, {median(first) / median(built_in):.2f}x)"
    )
    print(
        f"  bundle, cached            {median(cached):6.2f} s  "
        f"(+{median(cached) - median(built_in):.2f} s, {median(cached) / median(built_in):.2f}x)"
    )
    print(f"  the upload itself         {median(uploads) * 1000:6.0f} ms")


if __name__ == "__main__":
    main()
