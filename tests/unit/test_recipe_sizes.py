"""What admission knows of a recipe without torch matches the model a rank builds, and the
memory rule that admission and the node's rank limit share."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from ampfleet.core.fleet import NodeView
from ampfleet.core.memory import (
    BYTES_PER_PARAMETER,
    MB,
    RUNTIME_ALLOWANCE_BYTES,
    memory_refusal,
    rank_memory,
    slot_memory_mb,
)
from ampfleet.core.recipes import get_recipe
from ampfleet.workers.node import Capacity
from ampfleet.workers.training.task import RecipeContext

SMALL = {
    "digits": {"hidden": 24},
    "charlm": {"d_model": 32, "n_heads": 4, "n_layers": 3, "block_size": 16, "max_chars": 20_000},
    "gpt-bench": {"vocab_size": 96, "d_model": 48, "n_layers": 2, "n_heads": 4, "block_size": 24},
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_declared_parameter_count_is_the_built_models(name: str) -> None:
    recipe = get_recipe(name)
    hyperparameters = recipe.hyperparameters(**SMALL[name])
    task = recipe.build(hyperparameters, RecipeContext(0, 1, torch.device("cpu"), 0))
    built = sum(p.numel() for p in task.model.parameters())
    assert recipe.parameter_count(hyperparameters) == built


def _cpu_node(memory_mb: int | None, slots: int) -> NodeView:
    return NodeView("n", "cpu", None, None, {}, slots=slots, free=slots, memory_mb=memory_mb)


def test_estimate_is_sixteen_bytes_per_parameter_plus_activations_and_runtime() -> None:
    recipe = get_recipe("gpt-bench")
    hyperparameters: Any = recipe.hyperparameters()
    need = rank_memory(recipe, hyperparameters)
    assert need.model_states_bytes == recipe.parameter_count(hyperparameters) * BYTES_PER_PARAMETER
    assert need.total_bytes == (
        need.model_states_bytes + recipe.activation_bytes(hyperparameters) + RUNTIME_ALLOWANCE_BYTES
    )
    share = need.total_bytes // MB + 1
    assert memory_refusal(need, [_cpu_node(share * 4, slots=4)]) is None
    refusal = memory_refusal(need, [_cpu_node(share * 4 - 8, slots=4), _cpu_node(None, 1)])
    assert refusal is not None
    assert f"{share - 2:,} MB per slot" in refusal
    assert memory_refusal(need, [_cpu_node(None, slots=4)]) is None


def test_a_cpu_rank_is_limited_to_its_slots_share_and_a_gpu_rank_is_not() -> None:
    assert slot_memory_mb(16_000, 3) == 5_333
    assert Capacity("cpu", 4, None, None, memory_mb=16_000).rank_memory_limit_mb == 4_000
    assert Capacity("cpu", 4, None, None, memory_mb=None).rank_memory_limit_mb is None
    gpu = Capacity("cuda", 2, "H100", 81_559, memory_mb=163_118)
    assert gpu.rank_memory_limit_mb is None
