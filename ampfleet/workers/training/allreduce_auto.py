"""`allreduce_dtype: auto`: the dtype and the wire a job reduces its gradients by, measured
at the job's start on its own process group.

fp32 and each half-precision wire (on gloo: the two-rank swap, the ring, gloo's own
all_reduce; on NCCL: its own) reduce a gradient bucket the way the hook does, in rounds in
which they take turns, so that load that comes and goes hits them alike. Rounds go on while
the time budget lasts, between AUTO_MIN_ROUNDS and AUTO_MAX_ROUNDS after a warm-up round.
A wire's ratio to fp32 is the worse of two medians over the rounds (the slowest rank's
times): of its time over fp32's in the same round, which slow drifts in the load do not
move, and of its times over fp32's times, which a burst that hits one call of a round does
not move; where the two disagree, the figures do not show the wire faster.

Two margins keep the choice from flapping between runs where the figures are close: half
precision must beat fp32 by AUTO_MIN_SPEEDUP (a tie is not worth its rounding), and the
default wire (ring.default_algorithm: on two ranks the swap, the one that rounds only each
contribution) stays unless another beats it by AUTO_WIRE_MARGIN. Whatever wire is taken,
the hook's guard keeps comparing it with fp32 (allreduce.py).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from ampfleet.workers.training.allreduce import AllReduceState, compressed_all_reduce_
from ampfleet.workers.training.precision import DTYPES
from ampfleet.workers.training.ring import ALGORITHMS, Workspace, default_algorithm

# DDP's default bucket (bucket_cap_mb=25): what `auto` times, for models at least as large.
DDP_BUCKET_ELEMENTS = 25 * 2**20 // 4
# Half precision must beat fp32 by this much to be chosen: a tie is not worth its rounding.
AUTO_MIN_SPEEDUP = 1.1
# Another wire must beat the default one by this much to replace it.
AUTO_WIRE_MARGIN = 1.1
AUTO_MIN_ROUNDS = 3
AUTO_MAX_ROUNDS = 9
# The timed rounds' share of a job's start, all wires together (the warm-up round apart):
# one round of a 25 MiB bucket takes about 0.7 s at 1 Gbit/s (so the least rounds), 0.15 s
# at 10 Gbit/s (up to the most), where the wires are close and more rounds tell them apart.
AUTO_BUDGET_S = 3.0


@dataclass(frozen=True)
class AutoChoice:
    """What `allreduce_dtype: auto` measured on the job's own process group, and took: the
    dtype and, on gloo, the wire (ring.ALGORITHMS). It goes into the job's checkpoints: an
    attempt that resumes one on the same world keeps it rather than measure again and
    drift on timing noise."""

    half: str
    bucket_mib: float
    fp32_s: float
    half_s: float
    """The taken wire's median time (the fastest one's where fp32 was taken)."""
    world_size: int
    backend: str
    algorithm: str = ""
    """The half-precision wire ('' on NCCL, which has one, and in a checkpoint from before
    wires were timed, which used ring.default_algorithm)."""
    candidates: dict[str, float] = field(default_factory=dict)
    """Each half-precision wire timed, in seconds (the slowest rank's median)."""
    ratios: dict[str, float] = field(default_factory=dict)
    """Each wire's time over fp32's, as `measure_auto` judges it."""
    rounds: int = 0
    chose: str = ""
    """The dtype taken; '' in a checkpoint from before it was stored, whose rule was the
    medians' ratio against AUTO_MIN_SPEEDUP."""

    def applies_to(self, world_size: int, backend: str) -> bool:
        """Measured on a world like this one: another size or transport is another wire."""
        return (self.world_size, self.backend) == (world_size, backend)

    @property
    def dtype(self) -> str:
        if self.chose:
            return self.chose
        return self.half if self.fp32_s >= self.half_s * AUTO_MIN_SPEEDUP else "fp32"

    @property
    def wire(self) -> str | None:
        """The gloo wire to reduce half precision by (None: the default one)."""
        return self.algorithm if self.algorithm in ALGORITHMS else None

    def describe(self) -> str:
        def timed(seconds: float, ratio: float | None) -> str:
            return f"{seconds * 1e3:.1f} ms" + (f" ({ratio:.3f}x)" if ratio is not None else "")

        wires = ", ".join(
            f"{name} {timed(seconds, self.ratios.get(name))}"
            for name, seconds in self.candidates.items()
        )
        half = f"{self.half} {wires or timed(self.half_s, self.ratios.get('nccl'))}"
        over = f" by the {self.algorithm} wire" if self.algorithm and self.dtype != "fp32" else ""
        rounds = f", median of {self.rounds} rounds" if self.rounds else ""
        return (
            f"auto AllReduce measured on a {self.bucket_mib:.1f} MiB bucket{rounds}: fp32 "
            f"{self.fp32_s * 1e3:.1f} ms, {half}; chose {self.dtype}{over}"
        )


def choose(ratios: dict[str, float], default: str) -> tuple[str, bool]:
    """The wire to take and whether half precision pays on it, from each wire's ratio to
    fp32: the default wire unless another beats it by AUTO_WIRE_MARGIN, among the wires
    that beat fp32 by AUTO_MIN_SPEEDUP (the fastest where none does)."""
    fastest = min(ratios, key=lambda name: ratios[name])
    paying = {name for name, ratio in ratios.items() if ratio * AUTO_MIN_SPEEDUP <= 1.0}
    if not paying:
        return fastest, False
    if default in paying and ratios[default] <= ratios[fastest] * AUTO_WIRE_MARGIN:
        return default, True
    return fastest, True


def judge(times: dict[str, list[float]]) -> tuple[dict[str, float], dict[str, float]]:
    """Each run's median time, and each wire's ratio to fp32 (see the module's docstring),
    from the rounds' times of each run (fp32 among them)."""
    medians = {name: statistics.median(seconds) for name, seconds in times.items()}
    ratios = {
        name: max(
            statistics.median(t / f for t, f in zip(seconds, times["fp32"], strict=True)),
            medians[name] / medians["fp32"],
        )
        for name, seconds in times.items()
        if name != "fp32"
    }
    return medians, ratios


def measure_auto(state: AllReduceState, half: str, numel: int, device: torch.device) -> AutoChoice:
    """Times fp32 and each `half` wire on a bucket of `numel` gradients over the default
    group, takes what `choose` says; every rank decides on the same (slowest rank's)
    figures, so all take the same."""
    gradients = torch.randn(numel, generator=torch.Generator().manual_seed(dist.get_rank()))
    gradients = gradients.to(device)
    bucket = torch.empty_like(gradients)
    runs = _runs(state, DTYPES[half], bucket)
    table = _timed_rounds(runs, lambda: bucket.copy_(gradients), device)
    names = list(runs)
    medians, ratios = judge({name: table[:, i].tolist() for i, name in enumerate(names)})
    on_nccl = state.backend == "nccl"
    wire, pays = choose(ratios, "nccl" if on_nccl else default_algorithm(dist.get_world_size()))
    return AutoChoice(
        half,
        numel * 4 / 2**20,
        medians["fp32"],
        medians[wire],
        dist.get_world_size(),
        state.backend,
        algorithm="" if on_nccl else wire,
        candidates={} if on_nccl else {name: medians[name] for name in names[1:]},
        ratios=ratios,
        rounds=table.shape[0],
        chose=half if pays else "fp32",
    )


def _runs(
    state: AllReduceState, dtype: torch.dtype, bucket: torch.Tensor
) -> dict[str, Callable[[], object]]:
    """fp32 first, then each wire of this world, as the hook runs them."""
    world_size = dist.get_world_size()
    workspace = Workspace()

    def fp32() -> None:
        bucket.div_(world_size)
        dist.all_reduce(bucket)

    def nccl() -> None:
        wire = bucket.div_(world_size).to(dtype)
        dist.all_reduce(wire)
        bucket.copy_(wire)

    def by(algorithm: str) -> Callable[[], object]:
        return lambda: compressed_all_reduce_(
            bucket, dtype, workspace=workspace, directions=state.directions, algorithm=algorithm
        )

    runs: dict[str, Callable[[], object]] = {"fp32": fp32}
    if state.backend == "nccl":
        runs["nccl"] = nccl
    else:
        swap = world_size == 2
        runs.update({name: by(name) for name in ALGORITHMS if swap or name != "swap"})
    return runs


def _timed_rounds(
    runs: dict[str, Callable[[], object]], refill: Callable[[], object], device: torch.device
) -> torch.Tensor:
    """Seconds, a row per round and a column per run, each the slowest rank's: a warm-up
    round (it touches the buffers' pages), then rounds while AUTO_BUDGET_S lasts. Every
    rank stops after the same round: they agree on the time spent after each."""
    rows: list[list[float]] = []
    began = 0.0
    for round_ in range(AUTO_MAX_ROUNDS + 1):
        row = []
        for run in runs.values():
            refill()
            dist.barrier()
            started = time.perf_counter()
            run()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            row.append(time.perf_counter() - started)
        if round_ == 0:
            began = time.perf_counter()
            continue
        rows.append(row)
        spent = torch.tensor([time.perf_counter() - began], device=device)
        dist.all_reduce(spent, op=dist.ReduceOp.MAX)
        per_round = float(spent) / len(rows)
        if len(rows) >= AUTO_MIN_ROUNDS and float(spent) + per_round > AUTO_BUDGET_S:
            break
    table = torch.tensor(rows, dtype=torch.float64, device=device)
    dist.all_reduce(table, op=dist.ReduceOp.MAX)
    return table.cpu()
