"""How much memory one rank of a job needs, and how much one slot of a node offers.

Admission (API) refuses a job whose ranks cannot fit the slot share of any node that could
host it, and the node runs every rank under that same share (workers/launch.py), so a job
that was admitted on a wrong estimate fails with an out-of-memory error of its own instead
of taking the host down. Both sides read the rule here.

A slot's share is the node's registered memory divided by its slots: total RAM on a CPU
node, total GPU memory on a GPU node (one GPU per slot).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ampfleet.core.fleet import NodeView, job_request_of
from ampfleet.core.recipes import RecipeDefinition, get_recipe

MB = 1 << 20

BYTES_PER_PARAMETER = 16
"""AdamW on fp32 master weights: weights (4 bytes), gradients (4) and Adam's two moments
(4 + 4) for every parameter, whatever the autocast dtype. Under DDP every rank holds all of
them; under FSDP each rank holds its shard."""

RUNTIME_ALLOWANCE_BYTES = 512 * MB
"""The interpreter, torch, the process group and the data loader: a CPU rank's data segment
measured 250-350 MB before its first step, rounded up."""


@dataclass(frozen=True)
class RankMemory:
    parameters: int
    model_states_bytes: int
    activation_bytes: int
    runtime_bytes: int = RUNTIME_ALLOWANCE_BYTES
    shards: int = 1

    @property
    def total_bytes(self) -> int:
        return self.model_states_bytes + self.activation_bytes + self.runtime_bytes

    def describe(self) -> str:
        return (
            f"about {self.total_bytes / MB:,.0f} MB per rank ({self.parameters:,} parameters x "
            f"{BYTES_PER_PARAMETER} bytes for AdamW{self._sharding} = "
            f"{self.model_states_bytes / MB:,.0f} MB, activations "
            f"{self.activation_bytes / MB:,.0f} MB, runtime "
            f"{self.runtime_bytes / MB:,.0f} MB)"
        )

    @property
    def _sharding(self) -> str:
        return f" / {self.shards} FSDP shards" if self.shards > 1 else " (DDP: a whole replica)"


def rank_memory(recipe: RecipeDefinition, hyperparameters: Any, shards: int = 1) -> RankMemory:
    """The estimate for validated hyperparameters, the model states split into `shards`."""
    parameters = recipe.parameter_count(hyperparameters)
    return RankMemory(
        parameters=parameters,
        model_states_bytes=-(-parameters * BYTES_PER_PARAMETER // shards),
        activation_bytes=recipe.activation_bytes(hyperparameters),
        shards=shards,
    )


def job_rank_memory(resolved: Mapping[str, Any]) -> RankMemory:
    """The estimate for a resolved spec, whose hyperparameters its recipe has validated.
    'fsdp' shards the states over every rank, and so may 'auto' when DDP would not fit."""
    recipe = get_recipe(resolved["recipe"])
    strategy = (resolved.get("parallelism") or {}).get("strategy", "ddp")
    shards = job_request_of(resolved).slots if strategy in ("fsdp", "auto") else 1
    hyperparameters = recipe.hyperparameters.model_validate(resolved["hyperparameters"])
    return rank_memory(recipe, hyperparameters, shards)


def slot_memory_mb(memory_mb: int | None, slots: int) -> int | None:
    """One slot's share of the node's memory; None when the node did not say."""
    if memory_mb is None or slots < 1:
        return None
    return memory_mb // slots


def memory_refusal(need: RankMemory, matching: Iterable[NodeView]) -> str | None:
    """None if one rank fits the largest known slot share of the nodes that could host the
    job (or none of them registered its memory); otherwise why not."""
    shares = (slot_memory_mb(node.memory_mb, node.slots) for node in matching)
    known = [share for share in shares if share is not None]
    if not known or need.total_bytes <= max(known) * MB:
        return None
    return (
        f"the job needs {need.describe()}; the largest matching node offers "
        f"{max(known):,} MB per slot: choose a smaller model or batch"
    )
