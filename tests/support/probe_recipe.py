"""`probe`: a test recipe that reports what its rank sees, installed as a real entry point.

Its build prints every environment variable of the rank to stdout (the job's logs) and the
threads torch computes with, then allocates `allocate_mb` at once (to reach the rank's
memory limit), then trains a tiny linear model, sleeping `sleep_per_step_s` in each loss (an
idle job). The definition imports no torch, like every recipe's; `install_probe` writes the
distribution metadata that makes `ampfleet.recipes` list it for processes whose PYTHONPATH
holds the folder and the repository.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ampfleet.core.recipes import ENTRY_POINT_GROUP, RecipeDefinition

ENV_LINE_PREFIX = "probe-env "
THREADS_LINE_PREFIX = "probe-torch-threads "
REPOSITORY = Path(__file__).resolve().parents[2]


class ProbeHyperparameters(BaseModel):
    model_config = ConfigDict(extra="forbid")

    allocate_mb: int = Field(0, ge=0, le=1_000_000, description="Allocated at build.")
    sleep_per_step_s: float = Field(0.0, ge=0, le=60, description="Each loss sleeps: idle.")


def build(hp: ProbeHyperparameters, _ctx: Any) -> Any:
    import torch
    from torch.nn import functional as F  # noqa: N812
    from torch.utils.data import TensorDataset

    from ampfleet.workers.training.task import TrainingTask

    for name, value in sorted(os.environ.items()):
        print(f"{ENV_LINE_PREFIX}{name}={value}")
    print(f"{THREADS_LINE_PREFIX}{torch.get_num_threads()}")
    if hp.allocate_mb:
        torch.ones(hp.allocate_mb << 20, dtype=torch.uint8)
    generator = torch.Generator().manual_seed(0)
    features = torch.randn(64, 4, generator=generator)
    data = TensorDataset(features, (features.sum(dim=1) > 0).long())

    def loss(model: torch.nn.Module, batch: Any) -> torch.Tensor:
        time.sleep(hp.sleep_per_step_s)
        return F.cross_entropy(model(batch[0]), batch[1])

    def eval_step(model: torch.nn.Module, batch: Any) -> dict[str, torch.Tensor]:
        return {"loss_sum": loss(model, batch) * len(batch[1])}

    return TrainingTask(
        model=torch.nn.Linear(4, 2),
        train_dataset=data,
        val_dataset=None,
        loss=loss,
        eval_step=eval_step,
        eval_finalize=lambda sums: sums,
        batch_size=8,
        learning_rate=0.01,
    )


recipe = RecipeDefinition(
    name="probe",
    description="Reports its rank's environment; allocates on request.",
    hyperparameters=ProbeHyperparameters,
    build_path="tests.support.probe_recipe:build",
    parameter_count=lambda _hp: 10,
    metrics={"reward": "max"},  # a name the name rule does not know: the declaration says
)


def install_probe(folder: Path) -> str:
    """Makes `folder` a site of the probe's distribution; returns the PYTHONPATH to use."""
    dist_info = folder / "ampfleet_test_probe-0.dist-info"
    dist_info.mkdir(parents=True, exist_ok=True)
    (dist_info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: ampfleet-test-probe\nVersion: 0\n"
    )
    (dist_info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\nprobe = tests.support.probe_recipe:recipe\n"
    )
    return os.pathsep.join([str(folder), str(REPOSITORY)])
