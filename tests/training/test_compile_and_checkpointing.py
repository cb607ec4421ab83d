"""`parallelism.activation_checkpointing: full` and `parallelism.compile: true` on 2 real gloo
ranks through the Trainer, under DDP and FSDP: the option takes effect (the blocks' forward
runs again in backward; torch.compile traces the blocks) and the run trains as eager does;
a node without a C++ compiler refuses a compiled job at start, in words."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pytest
import torch

from ampfleet.workers.training.models.gpt import Block
from tests.support.localranks import RankFailedError, run_ranks
from tests.support.training import SMALL_CHARLM, losses, records, train_recipe

STEPS = 4
RUN = {
    "recipe": "charlm",
    "hyperparameters": {**SMALL_CHARLM, "max_chars": 50_000},
    "precision": "bf16",
    "allreduce_dtype": "bf16",
    "max_steps": STEPS,
}
LAYERS = SMALL_CHARLM["n_layers"]


def _training_block_forwards(rank: int, world_size: int, out: str, kwargs: dict) -> int:
    """Trains, and counts the calls of the blocks' forward in training mode (the final
    evaluation's are left out). Counted on the method itself: the recomputation in
    backward calls it without the module's hooks."""
    calls = 0
    forward = Block.forward

    def counted(self: Block, x: torch.Tensor) -> torch.Tensor:
        nonlocal calls
        calls += self.training
        return forward(self, x)

    Block.forward = counted  # type: ignore[method-assign]
    try:
        train_recipe(rank, world_size, out, **kwargs)
    finally:
        Block.forward = forward  # type: ignore[method-assign]
    return calls


def _compiled_graphs(rank: int, world_size: int, out: str, kwargs: dict) -> int:
    """Trains, and counts the graphs torch.compile traced in this rank."""
    from torch._dynamo.utils import counters

    train_recipe(rank, world_size, out, **kwargs)
    return int(counters["stats"]["unique_graphs"])


def _run(fn: Any, out: Path, strategy: str, parallelism: dict[str, Any]) -> list[Any]:
    kwargs = {**RUN, "strategy": strategy, "parallelism": parallelism}
    return run_ranks(partial(fn, out=str(out), kwargs=kwargs), 2, timeout_s=600)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_full_activation_checkpointing_recomputes_every_block_and_trains_alike(
    tmp_path: Path, strategy: str
) -> None:
    eager = _run(_training_block_forwards, tmp_path / "eager", strategy, {})
    assert eager == [STEPS * LAYERS] * 2
    full = {"activation_checkpointing": "full"}
    recomputed = _run(_training_block_forwards, tmp_path / "full", strategy, full)
    assert recomputed == [2 * STEPS * LAYERS] * 2  # each block again in backward
    # The recomputation replays the same arithmetic: the same losses, to the bit.
    assert losses(tmp_path / "full") == losses(tmp_path / "eager")


def _compile_trains_like_eager(tmp_path: Path, strategy: str, parallelism: dict) -> None:
    _run(_training_block_forwards, tmp_path / "eager", strategy, {})
    graphs = _run(_compiled_graphs, tmp_path / "compiled", strategy, parallelism)
    assert all(count >= 1 for count in graphs), graphs
    compiled, eager = losses(tmp_path / "compiled"), losses(tmp_path / "eager")
    assert sorted(compiled) == list(range(1, STEPS + 1))
    # Inductor fuses the bf16 elementwise work differently: close, not equal.
    for step, loss in eager.items():
        assert compiled[step] == pytest.approx(loss, rel=1e-3), (step, compiled, eager)


@pytest.mark.slow  # inductor builds C++ for every kernel: 1.5-2 minutes on 2 busy cores
def test_compile_traces_the_blocks_and_trains_like_eager_under_ddp(tmp_path: Path) -> None:
    _compile_trains_like_eager(tmp_path, "ddp", {"compile": True})


@pytest.mark.slow  # as above
def test_compile_with_activation_checkpointing_under_fsdp(tmp_path: Path) -> None:
    both = {"compile": True, "activation_checkpointing": "full"}
    _compile_trains_like_eager(tmp_path, "fsdp", both)


def test_compile_is_refused_at_start_where_the_node_has_no_cxx_compiler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Inductor builds with $CXX; the spawned ranks inherit it.
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-c++"))
    with pytest.raises(RankFailedError, match="compile: true needs a C\\+\\+ compiler") as info:
        _run(_compiled_graphs, tmp_path, "ddp", {"compile": True})
    assert "no-such-c++" in str(info.value)
    assert records(tmp_path) == []  # refused before the first step, not during it
