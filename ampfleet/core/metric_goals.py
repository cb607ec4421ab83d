"""Which metric series are objectives, and which way is better: the one rule behind the
metrics summary's `goal` and `best` (API), which the CLI's final metrics and its log
axis for losses read.

A job reports dozens of series (learning_rate, grad_norm, peak_memory_mb_rank0,
skipped_steps, ...); a "best" learning rate means nothing, so only objectives get one.
A series is an objective when its recipe declares it (`RecipeDefinition.metrics`, which
wins), or when its name is a known objective, with an optional split prefix: `loss`,
`val_loss`, `train_accuracy`, `val_bits_per_char`. Everything else has no direction."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal

MetricDirection = Literal["min", "max"]

_SPLIT = r"(?:(?:train|training|val|valid|validation|eval|test)_)?"
_LOWER_IS_BETTER = (
    "loss|nll|perplexity|ppl|bits_per_char|bpc|bits_per_byte|error|error_rate|wer|cer|mse|rmse|mae"
)
_HIGHER_IS_BETTER = (
    "accuracy|acc|top1|top5|top1_accuracy|top5_accuracy|f1|auc|roc_auc|precision|recall|"
    "map|bleu|rouge|score|iou|miou|dice"
)
_MINIMISED = re.compile(rf"^{_SPLIT}(?:{_LOWER_IS_BETTER})$")
_MAXIMISED = re.compile(rf"^{_SPLIT}(?:{_HIGHER_IS_BETTER})$")


def metric_goal(
    name: str, declared: Mapping[str, MetricDirection] | None = None
) -> MetricDirection | None:
    """The better direction of an objective (declared first, then by name); None otherwise."""
    if declared and name in declared:
        return declared[name]
    if _MINIMISED.match(name):
        return "min"
    if _MAXIMISED.match(name):
        return "max"
    return None
