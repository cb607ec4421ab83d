"""How far a trial gets past the rung that prunes it: one ASHA sweep on an embedded fleet,
and per pruned trial, the step of the evaluation it was pruned on, the last step it logged,
the seconds from that evaluation's point reaching the database to the cancel, and from the
cancel to its ranks' exit.

    python -m bench.prune_lag --trials 8

The wide space of bench.sweeps, 600 steps, an evaluation and a log line every 25 steps,
ASHA's first rung at 100, two trials at a time. A pruned trial's slot-seconds beyond its
rung are the pruner's lag: the rank's record buffer, the node's sync, the scheduler's pass,
the node seeing the cancel and the ranks' stop. Metric times are read from the fleet's
SQLite database: the time each point was stored.
"""

from __future__ import annotations

import argparse
import re
import sqlite3
import statistics
import tempfile
from datetime import datetime
from pathlib import Path

from bench.sweeps import SPACES, base, run_sweep
from tests.support.fleet import running_fleet

FIRST_RUNG = 100


def _moment(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=None)  # SQLite keeps no zone


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, running_fleet(Path(tmp), "embedded") as fleet:
        spec = {
            "name": "prune-lag",
            "base": base(600, 25),
            "space": SPACES["wide"],
            "objectives": [{"metric": "val_accuracy", "direction": "maximize"}],
            "sampler": {"type": "random", "seed": args.seed},
            "pruner": {"type": "asha", "min_resource": FIRST_RUNG, "reduction_factor": 3},
            "budget": {"max_trials": args.trials, "max_concurrent": 2},
        }
        sweep, _ = run_sweep(fleet, spec, timeout_s=3600)
        database = sqlite3.connect(Path(tmp) / "var" / "ampfleet.db")
        past_first_rung: list[int] = []
        print("trial  pruned at  last logged  point -> cancel s  cancel -> exit s")
        for trial in sweep["trials"]:
            if trial["state"] != "pruned" or not trial["reason"].startswith("asha"):
                continue
            job_id = trial["job_id"]
            rung = int(re.search(r"at step (\d+)", trial["reason"]).group(1))  # type: ignore[union-attr]
            stored, last = database.execute(
                "SELECT MIN(CASE WHEN name = 'val_accuracy' AND step = ? THEN time END), "
                "MAX(step) FROM metrics WHERE job_id = ?",
                (rung, job_id),
            ).fetchone()
            moments = {e["to_state"]: _moment(e["time"]) for e in fleet.events(job_id)}
            cancel, ended = moments["CANCELLING"], moments["CANCELLED"]
            print(
                f"{trial['number']:5}  {rung:9}  {last:11}  "
                f"{(cancel - _moment(stored)).total_seconds():16.2f}  "
                f"{(ended - cancel).total_seconds():16.2f}"
            )
            if rung == FIRST_RUNG:
                past_first_rung.append(last - rung)
        if past_first_rung:
            print(
                f"trials pruned at the first rung: {len(past_first_rung)}, logged "
                f"{statistics.median(past_first_rung)} steps past it (median; one log line "
                "every 25 steps)"
            )


if __name__ == "__main__":
    main()
