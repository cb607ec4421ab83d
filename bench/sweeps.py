"""Sweeps on a fleet of real processes, each figure beside its baseline in the same run.

    python -m bench.sweeps                          # both parts
    python -m bench.sweeps --trials 8 --steps 300   # smaller
    python -m bench.sweeps --skip-pruning           # the controller's overhead only
    python -m bench.sweeps --seeds 0 1000 2000      # part 1 per sampler seed, and medians
    python -m bench.sweeps --space wide --trials 48 --first-rung 100 --asha-first --skip-overhead
                                                    # part 1 where good configurations are rare

1. ASHA against no pruning: two sweeps of the same search space, sampler and seed, one
   after the other on one embedded fleet (digits, learning rate over three decades and
   precision, `--trials` trials of `--steps` steps, two at a time). The random sampler is
   reseeded per trial number, so both sweeps try the same configurations in the same
   order: they differ only in what the pruner stops. The target is the lower of the two
   best validation accuracies (both reached it); for each sweep, the slot-seconds its
   trials had held when a trial reaching it ended (from each trial job's placement to its
   end, cut at that moment), and in all.
   `--space wide` adds the width, dropout and weight decay and widens the learning rate
   (five decades), so that few configurations reach the top; `--first-rung` sets ASHA's
   first rung (default: the first evaluation); `--asha-first` runs the ASHA sweep first and
   stops the sweep without pruning once one of its trials reaches ASHA's best: the
   slot-seconds to the target are the same measurement, and the rest of that sweep's
   trials, which cannot change them, are not run (its "in all" is then not measured).
2. The sweep controller's overhead: on an idle fleet of one node with one slot, from the
   end of a job (its SUCCEEDED event) to the next one's node launching its ranks (STARTING):
   plain jobs queued behind each other (the slot freed, a pass places the next), against a
   sweep's trials run one at a time (the pass that records the trial that ended asks for
   the next one, admits it and places it). A few steps each; p50 and p90, and the ratio.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ampfleet.api.observability import nearest_rank
from tests.support.factories import job_spec
from tests.support.fleet import Fleet, running_fleet

STAMP = datetime.fromisoformat


def base(steps: int, eval_every: int) -> dict[str, Any]:
    return job_spec(
        resources={"procs_per_node": 1},
        precision="fp32",
        allreduce_dtype="fp32",
        stop={"max_steps": steps},
        eval_every_steps=eval_every,
        log_every_steps=eval_every,
        hyperparameters={"hidden": 256, "batch_size": 128},
    )


def run_sweep(
    fleet: Fleet, spec: dict[str, Any], timeout_s: float, stop_at: float | None = None
) -> tuple[dict[str, Any], float]:
    """The sweep once it ended, and its wall seconds from the POST. `stop_at`: cancel it once
    a complete trial's first objective reaches this value, and wait for its trials' jobs."""
    started = time.monotonic()
    response = fleet.http.post("/v1/sweeps", json=spec)
    response.raise_for_status()
    sweep_id = response.json()["id"]
    while time.monotonic() - started < timeout_s:
        sweep = fleet.http.get(f"/v1/sweeps/{sweep_id}").json()
        if sweep["state"] != "RUNNING":
            if _jobs_ended(fleet, sweep):
                return dict(sweep), time.monotonic() - started
        elif stop_at is not None and _values(sweep) and max(_values(sweep)) >= stop_at:
            cancelled = fleet.http.post(f"/v1/sweeps/{sweep_id}/cancel")
            if cancelled.status_code != 409:  # 409: it ended on its own meanwhile
                cancelled.raise_for_status()
        time.sleep(1.0)
    raise TimeoutError(f"sweep {sweep_id} still running after {timeout_s:g} s")


def _values(sweep: dict[str, Any]) -> list[float]:
    return [t["values"][0] for t in sweep["trials"] if t["state"] == "complete"]


def _jobs_ended(fleet: Fleet, sweep: dict[str, Any]) -> bool:
    return all(
        fleet.job(t["job_id"])["finished_at"] is not None for t in sweep["trials"] if t["job_id"]
    )


# -- 1. ASHA against no pruning -----------------------------------------------------------


SPACES: dict[str, dict[str, Any]] = {
    "narrow": {
        "learning_rate": {"type": "log_uniform", "low": 1e-4, "high": 3e-1},
        "precision": {"type": "categorical", "choices": ["fp32", "bf16"]},
    },
    # Five decades of learning rate and three more hyperparameters: a small share of the
    # configurations reaches the top, so where the first of them falls in the order varies.
    "wide": {
        "learning_rate": {"type": "log_uniform", "low": 1e-5, "high": 1.0},
        "hidden": {"type": "int", "low": 8, "high": 512, "log": True},
        "dropout": {"type": "uniform", "low": 0.0, "high": 0.8},
        "weight_decay": {"type": "log_uniform", "low": 1e-5, "high": 1.0},
        "precision": {"type": "categorical", "choices": ["fp32", "bf16"]},
    },
}


REDUCTION = 3
"""ASHA's reduction factor: a rung promotes the top third of the trials that reached it."""


@dataclass(frozen=True)
class PruningRun:
    trials: int
    steps: int
    eval_every: int
    timeout_s: float
    space: str
    first_rung: int
    asha_first: bool


def pruning(tmp: Path, run: PruningRun, seed: int) -> tuple[float, float | None]:
    """Both sweeps with the sampler's `seed`; the ratios none / ASHA of the slot-seconds to
    the target and in all (None where the sweep without pruning was stopped at the target)."""
    print(
        f"1. ASHA against no pruning: {run.trials} trials of up to {run.steps} steps (digits, "
        f"the {run.space} space: {', '.join(SPACES[run.space])}; random seed {seed}), first "
        f"rung {run.first_rung} steps, 2 at a time on one embedded node"
    )
    pruners = {
        "none": {"type": "none"},
        "asha": {"type": "asha", "min_resource": run.first_rung, "reduction_factor": REDUCTION},
    }
    order = ("asha", "none") if run.asha_first else ("none", "asha")
    found: dict[str, tuple[dict[str, Any], float, dict[str, dict[str, Any]]]] = {}
    with running_fleet(tmp / f"pruning-{seed}", "embedded") as fleet:
        for name in order:
            spec = {
                "name": f"bench-{name}",
                "base": base(run.steps, run.eval_every),
                "space": SPACES[run.space],
                "objectives": [{"metric": "val_accuracy", "direction": "maximize"}],
                "sampler": {"type": "random", "seed": seed},
                "pruner": pruners[name],
                "budget": {"max_trials": run.trials, "max_concurrent": 2},
            }
            stop_at = _best(found["asha"][0]) if name == "none" and run.asha_first else None
            sweep, wall = run_sweep(fleet, spec, run.timeout_s, stop_at)
            jobs = {t["job_id"]: fleet.job(t["job_id"]) for t in sweep["trials"] if t["job_id"]}
            found[name] = (sweep, wall, jobs)
    bests = {name: _best(sweep) for name, (sweep, _, _) in found.items()}
    target = min(bests.values())
    print(f"   target: val_accuracy {target:.4f} (the lower of the two sweeps' best)")
    to_target = {}
    for name, (sweep, wall, jobs) in found.items():
        reached = _reached_at(sweep, jobs, target)
        to_target[name] = _slot_seconds_until(jobs, reached)
        pruned = sweep["counts"].get("pruned", 0)
        stopped = " (stopped at the target)" if sweep["state"] == "CANCELLED" else ""
        print(
            f"   {name:5} best {bests[name]:.4f}  {pruned} of {len(sweep['trials'])} pruned  "
            f"reached at trial {_first_at(sweep, target)}  slot-s to target "
            f"{to_target[name]:7.1f}  in all {sweep['slot_s']['total']:7.1f}  wall {wall:6.1f} s"
            f"{stopped}"
        )
    print(f"   {_asha_breakdown(found['asha'][0], found['asha'][2], target, run.first_rung)}")
    total = {name: sweep["slot_s"]["total"] for name, (sweep, _, _) in found.items()}
    to_target_ratio = to_target["none"] / to_target["asha"]
    in_all = None if found["none"][0]["state"] == "CANCELLED" else total["none"] / total["asha"]
    in_all_text = "not measured" if in_all is None else f"{in_all:.2f}x"
    print(
        f"   no pruning / ASHA: {to_target_ratio:.2f}x the slot-seconds to the target, "
        f"in all {in_all_text}"
    )
    return to_target_ratio, in_all


def _at_target(sweep: dict[str, Any], target: float) -> list[dict[str, Any]]:
    """The complete trials whose first objective is at or above `target`."""
    return [t for t in sweep["trials"] if t["state"] == "complete" and t["values"][0] >= target]


def _first_at(sweep: dict[str, Any], target: float) -> int:
    """The number of the first trial (in the sampler's order) that completed at the target."""
    return min(int(t["number"]) for t in _at_target(sweep, target))


def _best(sweep: dict[str, Any]) -> float:
    values = [t["values"][0] for t in sweep["trials"] if t["state"] == "complete"]
    if not values:
        raise RuntimeError(f"sweep {sweep['id']} completed no trial: {sweep['reason']}")
    return float(max(values))


def _reached_at(sweep: dict[str, Any], jobs: dict[str, dict[str, Any]], target: float) -> datetime:
    """When the first complete trial at or above `target` ended."""
    return min(STAMP(jobs[t["job_id"]]["finished_at"]) for t in _at_target(sweep, target))


def _held(job: dict[str, Any], moment: datetime) -> float:
    """Slot-seconds the job held from its placement to its end, up to `moment`."""
    if job["scheduled_at"] is None:
        return 0.0
    placed = STAMP(job["scheduled_at"])
    ended = STAMP(job["finished_at"]) if job["finished_at"] else moment
    return float(job["gang_size"]) * max((min(ended, moment) - placed).total_seconds(), 0.0)


def _slot_seconds_until(jobs: dict[str, dict[str, Any]], moment: datetime) -> float:
    """Slot-seconds the trials' jobs held, up to `moment`."""
    return sum(_held(job, moment) for job in jobs.values())


def _asha_breakdown(
    sweep: dict[str, Any], jobs: dict[str, dict[str, Any]], target: float, first_rung: int
) -> str:
    """Where ASHA's slot-seconds to the target went: the trials it ran to the end up to the
    one that reached it, and what a trial it stopped at the first rung held."""
    moment = _reached_at(sweep, jobs, target)
    first = _first_at(sweep, target)
    early = [t for t in sweep["trials"] if t["number"] <= first and t["job_id"]]
    ended = [jobs[t["job_id"]] for t in early if t["state"] == "complete"]
    stopped = [
        _held(jobs[t["job_id"]], moment)
        for t in early
        if t["state"] == "pruned" and jobs[t["job_id"]]["progress"]["step"] < first_rung * REDUCTION
    ]
    mean = f"{statistics.mean(stopped):.1f}" if stopped else "-"
    return (
        f"ASHA up to trial {first}: {len(ended)} of {len(early)} run to the end, holding "
        f"{sum(_held(job, moment) for job in ended):.1f} slot-s; a trial stopped at the first "
        f"rung held {mean} s on average ({len(stopped)} trials)"
    )


# -- 2. the controller's overhead ---------------------------------------------------------


def overhead(tmp: Path, samples: int, backend: str) -> None:
    print(
        f"2. end of one job -> the next one's STARTING, on an idle one-slot fleet ({backend}): "
        f"{samples} gaps between plain jobs queued behind each other, {samples} between the "
        "trials of a sweep run one at a time"
    )
    with running_fleet(tmp / "overhead", backend, cpu_slots=1) as fleet:
        fleet.wait_for_state(fleet.submit(base(5, 5))["id"], {"SUCCEEDED"}, timeout=300)
        queued = [fleet.submit(base(5, 5))["id"] for _ in range(samples + 1)]
        for job_id in queued:
            fleet.wait_for_state(job_id, {"SUCCEEDED"}, timeout=120.0 * samples)
        plain = _gaps(fleet, sorted(queued, key=lambda j: _event_time(fleet, j, "STARTING")))
        spec = {
            "base": base(5, 5),
            "space": {"learning_rate": {"type": "log_uniform", "low": 1e-3, "high": 1e-2}},
            "objectives": [{"metric": "loss", "direction": "minimize"}],
            "sampler": {"type": "random", "seed": 0},
            "budget": {"max_trials": samples + 1, "max_concurrent": 1},
        }
        sweep, _ = run_sweep(fleet, spec, timeout_s=120.0 * samples)
        trials = _gaps(fleet, [t["job_id"] for t in sweep["trials"]])
    for name, gaps in (("plain jobs", plain), ("sweep trials", trials)):
        starting = [g[1] for g in gaps]
        print(
            f"   {name:12} p50 {statistics.median(starting) * 1000:6.0f} ms   "
            f"p90 {nearest_rank(sorted(starting), 0.9) * 1000:6.0f} ms   (placed, SCHEDULED: "
            f"p50 {statistics.median(g[0] for g in gaps) * 1000:5.0f} ms)"
        )
    ratio = statistics.median(g[1] for g in trials) / statistics.median(g[1] for g in plain)
    print(f"   trials / plain jobs, p50: {ratio:.2f}x")


def _gaps(fleet: Fleet, job_ids: list[str]) -> list[tuple[float, float]]:
    """Seconds from each job's end (SUCCEEDED) to the next one's placement (SCHEDULED) and
    to its node launching its ranks (STARTING)."""
    gaps = []
    for before, after in itertools.pairwise(job_ids):
        ended = _event_time(fleet, before, "SUCCEEDED")
        gaps.append(
            (
                _event_time(fleet, after, "SCHEDULED") - ended,
                _event_time(fleet, after, "STARTING") - ended,
            )
        )
    return gaps


def _event_time(fleet: Fleet, job_id: str, state: str) -> float:
    for event in fleet.events(job_id):
        if event["to_state"] == state:
            return STAMP(event["time"]).timestamp()
    raise RuntimeError(f"job {job_id} never reached {state}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--eval-every", type=int, default=25)
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=[0],
        help="Part 1 once per sampler seed: with few trials, where a good configuration falls "
        "in the order decides the slot-seconds to the target, so several seeds give a median.",
    )
    parser.add_argument("--space", choices=sorted(SPACES), default="narrow")
    parser.add_argument(
        "--first-rung",
        type=int,
        default=None,
        help="ASHA's first rung, steps (default: the first evaluation).",
    )
    parser.add_argument(
        "--asha-first",
        action="store_true",
        help="Run the ASHA sweep first and stop the one without pruning once it reaches "
        "ASHA's best (the same slot-seconds to the target, its 'in all' not measured).",
    )
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--backend", choices=("embedded", "postgres+redis"), default="embedded")
    parser.add_argument("--timeout", type=float, default=3600.0, help="Per sweep, seconds.")
    parser.add_argument("--skip-pruning", action="store_true")
    parser.add_argument("--skip-overhead", action="store_true")
    args = parser.parse_args()
    run = PruningRun(
        trials=args.trials,
        steps=args.steps,
        eval_every=args.eval_every,
        timeout_s=args.timeout,
        space=args.space,
        first_rung=args.first_rung or args.eval_every,
        asha_first=args.asha_first,
    )
    with tempfile.TemporaryDirectory() as tmp:
        if not args.skip_pruning:
            ratios = [pruning(Path(tmp), run, seed) for seed in args.seeds]
            if len(ratios) > 1:
                to_target = statistics.median(r[0] for r in ratios)
                in_all = [r[1] for r in ratios if r[1] is not None]
                in_all_text = f"{statistics.median(in_all):.2f}x" if in_all else "not measured"
                print(
                    f"   median over seeds {args.seeds}: no pruning / ASHA "
                    f"{to_target:.2f}x the slot-seconds to the target, in all {in_all_text}"
                )
        if not args.skip_overhead:
            overhead(Path(tmp), args.samples, args.backend)


if __name__ == "__main__":
    main()
