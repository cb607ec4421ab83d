"""What a cold rank's entry path imports beyond what it cannot do without: torch, DDP's own
imports (its constructor pulls in torch._dynamo, torch.distributed.tensor and FSDP) and the
recipe's (`digits`: scikit-learn). Each run is a fresh interpreter that imports those first,
then the rank's entry modules, and counts what they added and how long it took; medians over
the runs. Point PYTHONPATH at another checkout to measure that one the same way.

    python -m bench.entry_imports [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

PROBE = r"""
import json, os, sys, time
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
dist.init_process_group("gloo", rank=0, world_size=1)
DistributedDataParallel(torch.nn.Linear(4, 4))
import ampfleet.workers.training.recipes.digits
base = set(sys.modules)
started = time.perf_counter()
import ampfleet.workers.training.entry, ampfleet.workers.training.group
import ampfleet.workers.training.rank
seconds = time.perf_counter() - started
added = sorted(set(sys.modules) - base)
heavy = ("torch.distributed.checkpoint", "safetensors", "torch.profiler")
print(json.dumps({"seconds": seconds, "modules": len(added),
                  "loaded": [h for h in heavy if h in added]}))
"""


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    runs = []
    for _ in range(args.runs):
        done = subprocess.run(
            [sys.executable, "-c", PROBE, str(free_port())],
            capture_output=True,
            text=True,
            check=True,
            timeout=600,
        )
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"  {runs[-1]['modules']} modules, {runs[-1]['seconds']:.2f} s", flush=True)
    seconds = statistics.median(r["seconds"] for r in runs)
    modules = statistics.median(r["modules"] for r in runs)
    print(
        f"the rank's entry path beyond torch, DDP and the recipe: {modules:.0f} modules, "
        f"{seconds:.2f} s (median of {args.runs}); of the heavy ones it imports: "
        f"{', '.join(runs[-1]['loaded']) or 'none'}"
    )


if __name__ == "__main__":
    main()
