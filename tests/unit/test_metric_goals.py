"""The one rule for which series are objectives: what the summary's best, the CLI's final
metrics and its log axis all follow."""

from __future__ import annotations

import pytest

from ampfleet.core.metric_goals import metric_goal
from ampfleet.core.recipes import declared_metrics, installed_recipes

# Every series the loop and the node agent report, beside the built-in recipes' validation.
NOT_OBJECTIVES = [
    "learning_rate",
    "grad_norm",
    "skipped_steps",
    "samples_per_s",
    "step_time_s",
    "peak_memory_mb",
    "peak_memory_mb_rank1",
    "compute_s_rank0",
    "allreduce_bytes",
    "allreduce_relative_error",
    "time_forward_s",
    "loss_scale",
    "mfu",
    "flops_per_s",
    "cpu_percent_rank0",
    "gpu_util_percent_rank0",
]


@pytest.mark.parametrize(
    ("name", "goal"),
    [
        ("loss", "min"),
        ("val_loss", "min"),
        ("train_loss", "min"),
        ("val_bits_per_char", "min"),
        ("val_perplexity", "min"),
        ("val_accuracy", "max"),
        ("test_f1", "max"),
        ("accuracy", "max"),
    ],
)
def test_objectives_have_a_direction_by_name(name: str, goal: str) -> None:
    assert metric_goal(name) == goal


@pytest.mark.parametrize("name", NOT_OBJECTIVES)
def test_what_is_not_an_objective_has_no_direction(name: str) -> None:
    assert metric_goal(name) is None


def test_a_recipes_declaration_wins_over_the_name() -> None:
    declared = {"reward": "max", "val_loss": "max", "learning_rate": "min"}
    assert metric_goal("reward", declared) == "max"
    assert metric_goal("val_loss", declared) == "max"
    assert metric_goal("learning_rate", declared) == "min"
    assert metric_goal("val_accuracy", declared) == "max"  # not declared: the name rule


def test_installed_recipes_declare_what_the_name_rule_agrees_with() -> None:
    for name, recipe in installed_recipes().items():
        assert declared_metrics(name) == recipe.metrics
        for metric, goal in recipe.metrics.items():
            assert metric_goal(metric) == goal, (name, metric)
    assert declared_metrics("not-installed") == {}
