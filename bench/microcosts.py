"""Two small costs the design leans on, each against its alternative, in one run:

    python -m bench.microcosts [--mib 25] [--repeats 9]

- The two-rank swap's sum (ring.py `pair_average_`): the peer's bf16 contribution widened
  a cache-sized slice at a time into a scratch buffer and added fp32 to fp32, against the
  mixed-dtype `fp32 += bf16` torch also offers, on a bucket of `--mib` MiB of fp32.
- One heartbeat (workers/heartbeat.py): the rank's store into its mapped file, per phase.

Medians of `--repeats`; one thread (as a rank of a 2-core node has).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from ampfleet.workers.heartbeat import Heartbeat
from ampfleet.workers.training.ring import SLICE_ELEMENTS


def _median_s(run: Callable[[], object], repeats: int) -> float:
    run()  # the warm-up touches the pages
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def sum_costs(mib: float, repeats: int) -> tuple[float, float]:
    numel = int(mib * 2**20) // 4
    total = torch.randn(numel)
    theirs = torch.randn(numel).to(torch.bfloat16)
    widened = torch.empty(SLICE_ELEMENTS)

    def mixed() -> None:
        total.add_(theirs)

    def widening() -> None:
        for start in range(0, numel, SLICE_ELEMENTS):
            span = slice(start, start + SLICE_ELEMENTS)
            out = total[span]
            out.add_(widened[: out.numel()].copy_(theirs[span]))

    return _median_s(mixed, repeats), _median_s(widening, repeats)


def heartbeat_cost(beats: int) -> float:
    with tempfile.TemporaryDirectory() as folder:
        heartbeat = Heartbeat(Path(folder) / "heartbeat-0")
        try:
            started = time.perf_counter()
            for step in range(beats):
                heartbeat.beat(step, "forward")
            return (time.perf_counter() - started) / beats
        finally:
            heartbeat.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=float, default=25)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    torch.set_num_threads(1)
    mixed, widening = sum_costs(args.mib, args.repeats)
    print(
        f"sum of a {args.mib:g} MiB bucket: fp32 += bf16 {mixed * 1e3:.2f} ms, widened slices "
        f"{widening * 1e3:.2f} ms: the mixed-dtype add is {mixed / widening:.2f}x slower"
    )
    per_beat = statistics.median(heartbeat_cost(100_000) for _ in range(args.repeats))
    print(f"heartbeat: {per_beat * 1e6:.2f} us per beat (median of {args.repeats} x 100,000)")


if __name__ == "__main__":
    main()
