"""How long a job whose bundled recipe fails at import takes to be FAILED, on one idle local
fleet of real processes (the embedded default, bundled code in the bubblewrap sandbox),
beside a built-in job that trains a few steps, in the same run.

    python -m bench.bad_import [--rounds 3] [--ranks 2]

Each round submits the built-in `digits`, then a bundle whose recipe module imports a package
that is not installed, then one whose recipe module raises at import. Times are the server's,
from the jobs' events: STARTING (the node launches the ranks) to FAILED, and for the built-in
job STARTING to RUNNING (the ranks' own start-up: imports, rendezvous, first steps ready).
`traceback -> FAILED` is from the first rank's failure report (its own clock, this machine)
to the FAILED event: what the platform adds once the error is known. Medians over the rounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.support.archives import zip_of
from tests.support.factories import job_spec
from tests.support.fleet import Fleet, running_fleet

BROKEN = {
    "missing module": "import not_a_package_anyone_installed  # round {round}\n",
    "raises at import": "raise RuntimeError('the recipe module is broken')  # round {round}\n",
}


def event_times(fleet: Fleet, job_id: str) -> dict[str, datetime]:
    return {e["to_state"]: datetime.fromisoformat(e["time"]) for e in fleet.events(job_id)}


def traceback_time(fleet: Fleet, job_id: str) -> datetime:
    reports = (fleet.root / "var" / "runs" / job_id).glob("attempt-*/node-*/failure-*")
    earliest = min(json.loads(path.read_text())["time"] for path in reports)
    return datetime.fromtimestamp(earliest).astimezone()


def bundled_spec(bundle: str, ranks: int) -> dict[str, Any]:
    spec = job_spec(
        code={"bundle": bundle, "entrypoint": "broken_pkg.recipe:recipe"},
        resources={"procs_per_node": ranks},
        retry={"max_restarts": 0},
    )
    del spec["recipe"]
    return spec


class Figures:
    def __init__(self) -> None:
        self.to_running: list[float] = []
        self.to_failed: dict[str, list[float]] = {kind: [] for kind in BROKEN}
        self.after_traceback: dict[str, list[float]] = {kind: [] for kind in BROKEN}

    def round(self, fleet: Fleet, number: int, ranks: int) -> str:
        job = fleet.submit(job_spec(stop={"max_steps": 5}, resources={"procs_per_node": ranks}))
        fleet.wait_for_state(job["id"], {"SUCCEEDED"}, timeout=300)
        times = event_times(fleet, job["id"])
        self.to_running.append((times["RUNNING"] - times["STARTING"]).total_seconds())
        line = [f"round {number + 1}: built-in to RUNNING {self.to_running[-1]:.2f} s"]
        for kind, source in BROKEN.items():
            files = {
                "broken_pkg/__init__.py": b"",
                "broken_pkg/recipe.py": f"recipe = None\n{source.format(round=number)}".encode(),
            }
            uploaded = fleet.http.post("/v1/bundles", content=zip_of(files))
            assert uploaded.status_code == 201, uploaded.text
            job = fleet.submit(bundled_spec(uploaded.json()["id"], ranks))
            failed = fleet.wait_for_state(job["id"], {"FAILED"}, timeout=300)
            times = event_times(fleet, job["id"])
            self.to_failed[kind].append((times["FAILED"] - times["STARTING"]).total_seconds())
            lag = (times["FAILED"] - traceback_time(fleet, job["id"])).total_seconds()
            self.after_traceback[kind].append(lag)
            line.append(
                f"{kind}: to FAILED {self.to_failed[kind][-1]:.2f} s (traceback -> FAILED "
                f"{lag:.2f} s; {failed['failure_reason'][:50]!r})"
            )
        return "; ".join(line)

    def report(self, rounds: int, ranks: int) -> None:
        median = statistics.median
        print(f"\nmedian of {rounds} rounds, {ranks} ranks, embedded fleet:")
        print(f"  built-in           STARTING -> RUNNING {median(self.to_running):6.2f} s")
        for kind in BROKEN:
            print(
                f"  {kind:18s} STARTING -> FAILED  {median(self.to_failed[kind]):6.2f} s"
                f"   traceback -> FAILED {median(self.after_traceback[kind]):6.2f} s"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ranks", type=int, default=2)
    args = parser.parse_args()
    figures = Figures()
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp).chmod(0o755)  # the sandbox's uid must reach the fleet's run folders
        with running_fleet(Path(tmp), "embedded") as fleet:
            warm = fleet.submit(job_spec(stop={"max_steps": 5}))  # imports, page cache
            fleet.wait_for_state(warm["id"], {"SUCCEEDED"}, timeout=300)
            for number in range(args.rounds):
                print(figures.round(fleet, number, args.ranks), flush=True)
    figures.report(args.rounds, args.ranks)


if __name__ == "__main__":
    main()
