"""What one fleet of real processes costs before its first job, and to stop: the unit of the
end-to-end tests' cost (tests/support/fleet.py), on both configurations side by side.

    python -m bench.fleet_cost --rounds 3

Per round and configuration: a fleet of one node is started (`migrate`, `bootstrap-key`,
then API, scheduler and worker, until the node is alive), left idle a few seconds, then each
process is sent SIGTERM. Printed, medians over the rounds: the CPU seconds of the set-up
commands, of each server process and of the worker's warm launcher at that point, the
seconds each process took to exit, and the CPU of the whole fleet, stop included.
"""

from __future__ import annotations

import argparse
import resource
import signal
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import psutil

from tests.support.fleet import FLEET_CONFIGURATIONS, running_fleet

IDLE_S = 3.0


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def one_fleet(root: Path, backend: str) -> dict[str, float]:
    """One fleet's figures: CPU seconds per part, and seconds to exit per process."""
    figures: dict[str, float] = {}
    before = _children_cpu()
    with running_fleet(root, backend) as fleet:
        figures["cpu: migrate + bootstrap-key"] = _children_cpu() - before
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
    figures["cpu: the whole fleet, stop included"] = _children_cpu() - before
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
                for name, value in one_fleet(root, backend).items():
                    found[backend][name].append(value)
    print(f"one idle fleet, medians of {args.rounds} rounds (seconds)")
    names = list(dict.fromkeys(n for figures in found.values() for n in figures))
    print(f"{'':44}" + "".join(f"{backend:>18}" for backend in FLEET_CONFIGURATIONS))
    for name in names:
        cells = [found[b].get(name) for b in FLEET_CONFIGURATIONS]
        row = "".join(f"{statistics.median(c):18.2f}" if c else f"{'-':>18}" for c in cells)
        print(f"{name:44}{row}")


if __name__ == "__main__":
    main()
