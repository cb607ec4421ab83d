"""What one fleet of real processes costs before its first job, and to stop: the unit of the
end-to-end tests' cost (tests/support/fleet.py), on both configurations side by side.

    python -m bench.fleet_cost --rounds 3

Per round and configuration: a fleet of one node is started (its database migrated and an
admin key made, then API, scheduler and worker, until the node is alive), left idle a few
seconds, then each process is sent SIGTERM. Printed, medians over the rounds: the CPU
seconds of the set-up, of each server process and of the worker's warm launcher at that
point, the seconds each process took to exit, and the CPU of the whole fleet, stop included.

The set-up two ways, side by side on fresh databases: `ampfleet migrate` and `ampfleet
bootstrap-key` as processes (what a fleet ran until the tests did the same in their own
process), against `migrated_with_admin_key` in this process.
"""

from __future__ import annotations

import argparse
import contextlib
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import psutil

from tests.support.env import fresh_postgres_database
from tests.support.fleet import FLEET_CONFIGURATIONS, Fleet, migrated_with_admin_key, running_fleet

IDLE_S = 3.0


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _own_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def _all_cpu() -> float:
    return _children_cpu() + _own_cpu()


def setup_both_ways(root: Path, backend: str) -> dict[str, float]:
    """CPU seconds of the set-up as two commands, then in this process, each on a fresh
    database of the configuration."""
    figures = {}
    for way in ("commands", "in this process"):
        with contextlib.ExitStack() as stack:
            url = ""
            if backend != "embedded":
                url = stack.enter_context(fresh_postgres_database(migrate=False))
            fleet = Fleet(root / way.replace(" ", "-"), database_url=url, broker_url="")
            stack.callback(fleet.http.close)
            fleet.root.mkdir(parents=True)
            before = _all_cpu()
            if way == "commands":
                for command in (["migrate"], ["bootstrap-key"]):
                    subprocess.run(
                        [sys.executable, "-m", "ampfleet.cli", *command],
                        env=fleet.env,
                        cwd=fleet.root,
                        check=True,
                        capture_output=True,
                    )
            else:
                migrated_with_admin_key(fleet.env)
            figures[f"cpu: set-up, {way}"] = _all_cpu() - before
    return figures


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def one_fleet(root: Path, backend: str) -> dict[str, float]:
    """One fleet's figures: CPU seconds per part, and seconds to exit per process."""
    figures: dict[str, float] = {}
    before = _all_cpu()
    with running_fleet(root, backend) as fleet:
        figures["cpu: set-up (this process included)"] = _all_cpu() - before
        time.sleep(IDLE_S)
        for name, popen in fleet.processes.items():
            process = psutil.Process(popen.pid)
            figures[f"cpu: {name}"] = _cpu(process)
            launcher = sum(_cpu(child) for child in process.children(recursive=True))
            if launcher:
                figures[f"cpu: {name}'s warm launcher"] = launcher
        stopping = time.monotonic()
        for popen in fleet.processes.values():
            popen.send_signal(signal.SIGTERM)
        for name, popen in fleet.processes.items():
            popen.wait(timeout=60)
            figures[f"exit after SIGTERM: {name}"] = time.monotonic() - stopping
    figures["cpu: the whole fleet, stop included"] = _all_cpu() - before
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    found: dict[str, dict[str, list[float]]] = {b: defaultdict(list) for b in FLEET_CONFIGURATIONS}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for backend in FLEET_CONFIGURATIONS:  # interleaved: drift hits both alike
                root = Path(tmp) / f"{backend}-{round_}"
                figures = {**setup_both_ways(root, backend), **one_fleet(root / "fleet", backend)}
                for name, value in figures.items():
                    found[backend][name].append(value)
    print(f"one idle fleet, medians of {args.rounds} rounds (seconds)")
    names = list(dict.fromkeys(n for figures in found.values() for n in figures))
    print(f"{'':44}" + "".join(f"{backend:>18}" for backend in FLEET_CONFIGURATIONS))
    for name in names:
        cells = [found[b].get(name) for b in FLEET_CONFIGURATIONS]
        row = "".join(f"{statistics.median(c):18.2f}" if c else f"{'-':>18}" for c in cells)
        print(f"{name:44}{row}")
    for backend in FLEET_CONFIGURATIONS:
        commands = statistics.median(found[backend]["cpu: set-up, commands"])
        in_process = statistics.median(found[backend]["cpu: set-up, in this process"])
        print(f"set-up, {backend}: commands / in this process = {commands / in_process:.1f}x")


if __name__ == "__main__":
    main()
