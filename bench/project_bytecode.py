"""What a process that imports the project pays to compile it, where PYTHONDONTWRITEBYTECODE
is set and no bytecode of the checkout exists (the baseline: every process compiles what it
imports), against the same imports once `make test` has compiled the checkout (ours).

    python -m bench.project_bytecode --starts 5 --runs 3

Per run, `--starts` pairs of process starts alternate between the two ways (drift hits both
alike); each imports what a fleet's API, scheduler and worker import, in a copy of the
checkout's `ampfleet` folder, with and without its `__pycache__`. Printed: the median CPU
seconds of a start each way, and their difference.
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import ampfleet

SERVER_IMPORTS = "import ampfleet.api.app, ampfleet.scheduler.loop, ampfleet.workers.main"


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def one_start(root: Path) -> float:
    """CPU seconds of one process importing the servers' modules from `root`."""
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    before = _children_cpu()
    subprocess.run([sys.executable, "-c", SERVER_IMPORTS], env=env, check=True)
    return _children_cpu() - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    source = Path(ampfleet.__file__).parent
    ignore = shutil.ignore_patterns("__pycache__")
    with tempfile.TemporaryDirectory() as tmp:
        roots = {way: Path(tmp) / way for way in ("source only", "compiled")}
        for root in roots.values():
            shutil.copytree(source, root / "ampfleet", ignore=ignore)
        compileall.compile_dir(roots["compiled"] / "ampfleet", quiet=1)
        for run in range(args.runs):
            found: dict[str, list[float]] = {way: [] for way in roots}
            for _ in range(args.starts):
                for way, starts in found.items():
                    starts.append(one_start(roots[way]))
            medians = {way: statistics.median(starts) for way, starts in found.items()}
            print(
                f"run {run + 1}: median CPU-s of a start over {args.starts}: "
                f"source only {medians['source only']:.3f}, compiled {medians['compiled']:.3f}, "
                f"saved {medians['source only'] - medians['compiled']:.3f} "
                f"({medians['source only'] / medians['compiled']:.2f}x)"
            )


if __name__ == "__main__":
    main()
