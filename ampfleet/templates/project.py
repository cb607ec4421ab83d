"""The files of a new recipe project, as `ampfleet init NAME` writes them.

The recipe classifies the rows of a CSV file (numeric feature columns, then an integer
label), read from the job's input `train`; without one it makes up a two-class problem, so
the project trains as soon as it is written. `data/example.csv` is such a file.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

RECIPE = '''"""{name}: a classifier of a CSV file's rows (feature columns, then an integer label).

The platform's training loop owns the optimizer (AdamW), the warmup and cosine schedule,
gradient clipping, mixed precision, data parallelism, checkpoints and the model export;
this module says what the model, the data and the scores are. Try it here first:

    ampfleet run-local job.yaml --code . --data train=data/example.csv
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn
from torch.nn import functional as F  # noqa: N812
from torch.utils.data import TensorDataset

from ampfleet.core.recipes import RecipeDefinition
from ampfleet.workers.training.task import RecipeContext, TrainingTask


class Hyperparameters(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt name fails the job, says which

    features: int = Field(2, ge=1, le=4096, description="Feature columns before the label.")
    classes: int = Field(2, ge=2, le=1000)
    hidden: int = Field(64, ge=4, le=4096)
    learning_rate: float = Field(3e-3, gt=0.0, le=1.0)
    weight_decay: float = Field(0.01, ge=0.0, le=1.0)
    batch_size: int = Field(32, ge=1, le=4096, description="Per rank.")
    warmup_steps: int = Field(10, ge=0)
    val_fraction: float = Field(0.2, gt=0.0, lt=0.9)


def parameter_count(hp: Hyperparameters) -> int:
    return (hp.features + 1) * hp.hidden + (hp.hidden + 1) * hp.classes


def read_rows(path: Path, hp: Hyperparameters) -> tuple[torch.Tensor, torch.Tensor]:
    features, labels = [], []
    with path.open(newline="") as file:
        for number, row in enumerate(csv.reader(file), start=1):
            try:
                values = [float(cell) for cell in row[: hp.features]]
                label = int(row[hp.features])
            except (ValueError, IndexError):
                if number == 1:
                    continue  # a header
                raise ValueError(
                    f"{{path.name}} line {{number}}: expected {{hp.features}} numbers and a label"
                ) from None
            if not 0 <= label < hp.classes:
                raise ValueError(f"{{path.name}} line {{number}}: label {{label}} out of range")
            features.append(values)
            labels.append(label)
    return torch.tensor(features), torch.tensor(labels)


def made_up_rows(hp: Hyperparameters, count: int = 1024) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    labels = torch.randint(0, hp.classes, (count,), generator=generator)
    centres = torch.randn(hp.classes, hp.features, generator=generator) * 3
    return centres[labels] + torch.randn(count, hp.features, generator=generator), labels


def build(hp: Hyperparameters, ctx: RecipeContext) -> TrainingTask:
    source = ctx.inputs.get("train")
    features, labels = read_rows(source, hp) if source else made_up_rows(hp)
    # The same split on every rank and every attempt: a fixed generator, not the job's seed.
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(1234))
    cut = int(len(labels) * (1 - hp.val_fraction))
    train, val = order[:cut], order[cut:]
    if ctx.rank == 0 and ctx.output_dir is not None:  # kept as the job's outputs/ artifacts
        summary = {{"rows": len(labels), "train": len(train), "validation": len(val)}}
        (ctx.output_dir / "data_summary.json").write_text(json.dumps(summary))
    model = nn.Sequential(
        nn.Linear(hp.features, hp.hidden), nn.GELU(), nn.Linear(hp.hidden, hp.classes)
    )
    return TrainingTask(
        model=model,
        train_dataset=TensorDataset(features[train], labels[train]),
        val_dataset=TensorDataset(features[val], labels[val]),
        loss=lambda model, batch: F.cross_entropy(model(batch[0]), batch[1]),
        eval_step=evaluate,
        eval_finalize=lambda sums: {{
            "val_loss": sums["loss_sum"] / max(sums["count"], 1.0),
            "val_accuracy": sums["correct"] / max(sums["count"], 1.0),
        }},
        batch_size=hp.batch_size,
        learning_rate=hp.learning_rate,
        weight_decay=hp.weight_decay,
        warmup_steps=hp.warmup_steps,
    )


def evaluate(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Sums over the batch, not means: the loop adds them up over batches and ranks."""
    features, labels = batch
    logits = model(features).float()
    return {{
        "loss_sum": F.cross_entropy(logits, labels, reduction="sum"),
        "correct": (logits.argmax(dim=-1) == labels).sum().float(),
        "count": torch.tensor(float(labels.numel())),
    }}


recipe = RecipeDefinition(
    name="{name}",
    description="Classifies the rows of a CSV file.",
    hyperparameters=Hyperparameters,
    build_path="{package}.recipe:build",
    parameter_count=parameter_count,
    metrics={{"val_loss": "min", "val_accuracy": "max"}},
)
'''

JOB = """# Submit with: ampfleet submit job.yaml --code . --data train=data/example.csv
name: {name}
code:
  entrypoint: {package}.recipe:recipe
hyperparameters:
  features: 2
  classes: 2
resources:
  procs_per_node: 2
precision: bf16
allreduce_dtype: bf16
stop:
  max_steps: 200
eval_every_steps: 50
"""

PYPROJECT = """[project]
name = "{name}"
version = "0.1.0"
description = "An ampfleet recipe."
requires-python = ">=3.11"
# torch and ampfleet come from the worker; a job may ask for more in code.requirements.
dependencies = []
"""

README = """# {name}

An ampfleet recipe project from `ampfleet init {name}` (`ampfleet --help` lists the commands).

- `{package}/recipe.py`: the recipe (model, data, scores); the platform's loop does the rest.
- `job.yaml`: the job spec; `code.entrypoint` names the recipe inside this folder.
- `data/example.csv`: a small dataset in the format the recipe reads (two features, a label).

Try it on this machine, then on the fleet:

    ampfleet run-local job.yaml --code . --data train=data/example.csv --steps 20
    ampfleet submit job.yaml --code . --data train=data/example.csv --follow

The folder is packed without `.git`, virtualenvs, caches and what `.gitignore` and
`.ampignore` leave out; data goes as a dataset (`--data`), not in the bundle.
"""

AMPIGNORE = "# Left out of the code bundle (gitignore syntax); data goes up with --data.\ndata/\n"


def package_name(name: str) -> str:
    """A Python package name for the project `name`: `my-model` gives `my_model`."""
    package = re.sub(r"\W+", "_", name).strip("_").lower() or "recipe"
    return f"r_{package}" if package[0].isdigit() else package


def example_csv(rows: int = 400) -> str:
    """Two features and a label: two overlapping clouds, the same file every time."""
    generator = random.Random(0)
    lines = ["x1,x2,label"]
    for _ in range(rows):
        label = generator.randrange(2)
        centre = 1.5 if label else -1.5
        x1, x2 = generator.gauss(centre, 1.0), generator.gauss(-centre, 1.0)
        lines.append(f"{x1:.4f},{x2:.4f},{label}")
    return "\n".join(lines) + "\n"


def write_project(folder: Path, name: str) -> list[Path]:
    """Writes the project into `folder` (which must not exist yet); the files written."""
    package = package_name(name)
    files = {
        "pyproject.toml": PYPROJECT,
        "README.md": README,
        "job.yaml": JOB,
        ".ampignore": AMPIGNORE,
        f"{package}/__init__.py": "",
        f"{package}/recipe.py": RECIPE,
    }
    folder.mkdir(parents=True)
    written = []
    for relative, template in files.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(template.format(name=name, package=package))
        written.append(path)
    data = folder / "data" / "example.csv"
    data.parent.mkdir()
    data.write_text(example_csv())
    return [*written, data]
