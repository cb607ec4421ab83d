"""The largest gpt-bench that trains on 2 gloo ranks under a fixed memory cap per rank, DDP
bf16 against FSDP bf16 (fp32 master shards), and the ratio of their parameters.

    python -m bench.largest_model --cap-mb 2560       # d_model 768, n_layers searched

Every trial runs in fresh rank processes that cap their own memory before the model is
built, the way the launcher caps a job's slot (RLIMIT_DATA: private writable memory), then
train `--steps` optimizer steps through ampfleet's Trainer (bench.memory's rank function).
A trial fits when every rank finishes; it does not when a rank's allocation is refused.
For each strategy a bisection over n_layers at a fixed d_model: the lower bracket is a size
that trained, the upper one the first whose model states alone (16 bytes per parameter,
divided by the ranks under FSDP) exceed the cap, or one that failed.
"""

from __future__ import annotations

import argparse
import re
import time
from dataclasses import dataclass

from torch.multiprocessing import ProcessExitedException  # type: ignore[attr-defined]

from ampfleet.recipes.gpt_bench import GPTBenchHyperparameters, parameter_count
from ampfleet.workers.rank_memory import ALLOCATION_FAILURES
from ampfleet.workers.training.parallel import MB, STATE_BYTES_PER_PARAMETER
from bench.memory import gpt_bench_model, train_and_measure
from tests.support.localranks import RankFailedError, run_ranks

STRATEGIES = ["ddp", "fsdp"]
PRECISION = "bf16"
# How else a refused allocation reads: C++'s, Python's, a thread that could not start.
OTHER_REFUSALS = ("bad_alloc", "memoryerror", "resource temporarily unavailable")


@dataclass(frozen=True)
class Trial:
    layers: int
    parameters: int
    fits: bool
    detail: str
    """The peak MB per rank when it fits; else how it failed."""


def _refused_allocation(failure: RankFailedError | ProcessExitedException) -> str | None:
    """How a trial ran out of its cap, or None when it failed for another reason."""
    if isinstance(failure, ProcessExitedException):
        # A native allocation refused off the Python thread (gloo's, the allocator's)
        # aborts the process instead of raising.
        return f"a rank died ({failure})"
    for rank, error in failure.failures.items():
        words = error.lower()
        # EAGAIN: a new thread's stack is private writable memory too, so past the cap
        # gloo cannot start its threads (nothing else limits threads here).
        if any(w in words for w in (*ALLOCATION_FAILURES, *OTHER_REFUSALS)):
            asked = re.search(r"tried to allocate (\d+) bytes", error)
            what = f"{int(asked[1]) / MB:,.0f} MB more" if asked else error.splitlines()[0][:100]
            return f"rank {rank} was refused {what}"
    return None


def trial(strategy: str, layers: int, args: argparse.Namespace) -> Trial:
    model = gpt_bench_model(args.d_model, layers, args.vocab)
    parameters = parameters_of(layers, args)
    started = time.monotonic()
    try:
        ranks = run_ranks(
            train_and_measure,
            args.ranks,
            strategy,
            PRECISION,
            model,
            args.steps,
            args.cap_mb,
            timeout_s=600,
        )
    except (RankFailedError, ProcessExitedException) as failure:
        refused = _refused_allocation(failure)
        if refused is None:
            raise
        result = Trial(layers, parameters, False, refused)
    else:
        peak = max(r["peak_mb"] for r in ranks)
        result = Trial(layers, parameters, True, f"peak {peak:,.0f} MB per rank")
    verdict = "fits" if result.fits else "does not fit"
    print(
        f"  {strategy} {layers:>3} layers {parameters / 1e6:>7.1f}M: {verdict} "
        f"({result.detail}; {time.monotonic() - started:.0f} s)",
        flush=True,
    )
    return result


def parameters_of(layers: int, args: argparse.Namespace) -> int:
    return parameter_count(
        GPTBenchHyperparameters(**gpt_bench_model(args.d_model, layers, args.vocab))
    )


def states_exceed_cap(strategy: str, layers: int, args: argparse.Namespace) -> bool:
    shards = args.ranks if strategy == "fsdp" else 1
    states = parameters_of(layers, args) * STATE_BYTES_PER_PARAMETER / shards
    return bool(states > args.cap_mb * MB)


def largest(strategy: str, args: argparse.Namespace) -> Trial | None:
    """The largest n_layers that trains under the cap, by bisection between nothing (0
    layers) and the first power of two whose model states alone exceed the cap."""
    upper = 1
    while not states_exceed_cap(strategy, upper, args):
        upper *= 2
    lower, best = 0, None
    while upper - lower > 1:
        attempt = trial(strategy, (lower + upper) // 2, args)
        if attempt.fits:
            lower, best = attempt.layers, attempt
        else:
            upper = attempt.layers
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cap-mb", type=int, default=2560, help="memory cap per rank")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--d-model", type=int, default=768)
    parser.add_argument("--vocab", type=int, default=32768)
    args = parser.parse_args()
    print(
        f"gpt-bench d_model {args.d_model}, vocab {args.vocab}, {args.ranks} gloo ranks, "
        f"{args.steps} steps of 2 x 128 tokens per rank, {PRECISION} compute and reduction, "
        f"each rank capped at {args.cap_mb:,} MB (RLIMIT_DATA)",
        flush=True,
    )
    found = {strategy: largest(strategy, args) for strategy in STRATEGIES}
    for strategy, best in found.items():
        figure = (
            "nothing fits"
            if best is None
            else f"{best.layers} layers, {best.parameters / 1e6:.1f}M parameters ({best.detail})"
        )
        print(f"largest under {strategy.upper()}: {figure}")
    ddp, fsdp = found["ddp"], found["fsdp"]
    if ddp is not None and fsdp is not None:
        print(f"FSDP/DDP parameters: {fsdp.parameters / ddp.parameters:.2f}x")


if __name__ == "__main__":
    main()
