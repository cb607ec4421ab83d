"""The CPU peak probe a rank runs before its first step (training/flops.py), against the
probe it replaced (six 512x512 matmuls: one to pick the kernels, five timed), in one run:

    python -m bench.peak_probe [--rounds 5] [--threads 1,2] [--dtypes fp32,bf16,fp16]

Each probe runs in a fresh interpreter with torch imported, as in a rank that has just
started (the first matmul of a process pays the kernels' set-up). Printed per dtype and
thread count: the seconds each probe took and the peak each reported, medians of
`--rounds`, and ours over the fixed probe for both. A CPU without native half-precision
matmul (no AVX512-BF16 or AMX) is where the fixed probe cost seconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

# Both run training/flops.py's own probe: the fixed one as it was, its sizes cut to 512 alone
# and its budget lifted (a warm-up and five timed matmuls), the bounded one as it is.
FIXED = """
import math
import time
import torch
from ampfleet.workers.training import flops

flops.PROBE_SIZES, flops.PROBE_BUDGET_S = (512,), math.inf
"""

BOUNDED = """
import time
import torch
from ampfleet.workers.training import flops
"""

TIMED = """
torch.set_num_threads({threads})
started = time.perf_counter()
rate = flops.probe_matmul_flops("{dtype}")
print(json.dumps({{"seconds": time.perf_counter() - started, "gflops": rate / 1e9}}))
"""


def run_probe(source: str, dtype: str, threads: int) -> dict[str, float]:
    code = "import json\n" + source + TIMED.format(threads=threads, dtype=dtype)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--dtypes", default="fp32,bf16,fp16")
    args = parser.parse_args()
    print(
        f"{'dtype':>5} {'thr':>3} | {'fixed s':>8} {'ours s':>8} {'ratio':>6} | "
        f"{'fixed GFLOP/s':>13} {'ours GFLOP/s':>12} {'ratio':>6}"
    )
    for dtype in args.dtypes.split(","):
        for threads in (int(t) for t in args.threads.split(",")):
            runs: dict[str, list[dict[str, float]]] = {"fixed": [], "ours": []}
            for _ in range(args.rounds):  # interleaved, so drift hits both alike
                runs["fixed"].append(run_probe(FIXED, dtype, threads))
                runs["ours"].append(run_probe(BOUNDED, dtype, threads))
            med = {
                (name, key): statistics.median(r[key] for r in results)
                for name, results in runs.items()
                for key in ("seconds", "gflops")
            }
            print(
                f"{dtype:>5} {threads:>3} | {med['fixed', 'seconds']:8.3f} "
                f"{med['ours', 'seconds']:8.3f} "
                f"{med['ours', 'seconds'] / med['fixed', 'seconds']:5.2f}x | "
                f"{med['fixed', 'gflops']:13.2f} {med['ours', 'gflops']:12.2f} "
                f"{med['ours', 'gflops'] / med['fixed', 'gflops']:5.2f}x"
            )


if __name__ == "__main__":
    main()
