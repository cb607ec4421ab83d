"""The model a SUCCEEDED job hands its user: `model.safetensors` and `manifest.json`.

Rank 0 writes them at the end of a completed run, into the attempt's export folder, and
appends one `artifact` record per file to its records; the node agent uploads them and lists
them. Ranks never talk to the store. safetensors rather than a pickle: loading it runs no
code, and every framework reads it. The weights are the fp32 master weights the optimizer
stepped (autocast only ever made half-precision copies of them); `export.dtype: bf16` adds a
bf16 rounding of the same weights. The manifest says how they came to be: recipe,
hyperparameters (as the recipe's model resolved them, every default in: enough to build the
model again), the resolved spec, the precision and AllReduce dtype actually used with every
fallback this node saw, the final metrics, the checkpoint step, the sha256 of each file and
the versions of the packages that trained it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ampfleet.core.artifact_names import (
    HF_PREFIX,
    MANIFEST,
    MODEL,
    MODEL_BF16,
    checkpoint_name,
)
from ampfleet.workers.rundir import FALLBACK_REASONS, RecordWriter, RunDir
from ampfleet.workers.training.outputs import (
    MANIFEST_FORMAT,
    ExportedFile,
    atomic_write,
    collect_outputs,
    described,
    package_versions,
    recipe_label,
    regular_files,
    write_artifact_records,
)


@dataclass(frozen=True)
class RunSummary:
    """How the completed run ended, as the loop knows it."""

    step: int
    metrics: dict[str, float]
    precision: str
    allreduce_dtype: str
    world_size: int
    backend: str
    hyperparameters: dict[str, Any]
    """The recipe's validated model, dumped: every default filled in, so the artifacts alone
    rebuild the model (a bundled recipe's, which the API never sees, included)."""


def export_run(
    run_dir: RunDir,
    job: dict[str, Any],
    model: nn.Module,
    run: RunSummary,
    writer: RecordWriter,
    *,
    gathered: dict[str, torch.Tensor] | None = None,
    recipe_export: Callable[[dict[str, torch.Tensor], Path], dict[str, Any]] | None = None,
) -> list[ExportedFile]:
    """Writes the export of a completed run (rank 0 only) and records each file as an
    artifact; returns what it wrote. `gathered`: a sharded model's whole state dict, which
    every rank took part in gathering (`ParallelModel.full_state_dict`). `recipe_export`:
    the recipe's own formats (`TrainingTask.export`), written from the same weights."""
    spec = job["spec"]
    run_dir.export_dir.mkdir(parents=True, exist_ok=True)
    lineage = {"precision": run.precision, "allreduce_dtype": run.allreduce_dtype}
    master = master_weights(model.state_dict() if gathered is None else gathered)
    files = [_weights(run_dir.export_dir / MODEL, master, "float32", job, run, lineage)]
    if spec.get("export", {}).get("dtype") == "bf16":
        rounded = {
            k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in master.items()
        }
        files.append(
            _weights(run_dir.export_dir / MODEL_BF16, rounded, "bfloat16", job, run, lineage)
        )
    model_lineage = {}
    if recipe_export is not None:
        model_lineage = recipe_export(master, run_dir.export_dir)
        files.extend(_recipe_files(run_dir.export_dir))
    del master
    outputs, left_out = collect_outputs(run_dir.output_dir)
    manifest = build_manifest(run_dir, job, run, files, outputs, left_out)
    manifest["lineage"] = {**lineage_of(spec, run), **model_lineage}
    manifest_path = run_dir.export_dir / MANIFEST
    atomic_write(manifest_path, lambda tmp: tmp.write_text(json.dumps(manifest, indent=2)))
    files.append(described(manifest_path, "model", MANIFEST, {"format": MANIFEST_FORMAT}))
    write_artifact_records(writer, [*outputs, *files], run.step)
    return [*outputs, *files]


def _recipe_files(export_dir: Path) -> list[ExportedFile]:
    folder = export_dir / HF_PREFIX
    return [
        described(path, "model", HF_PREFIX + path.relative_to(folder).as_posix(), {})
        for path in regular_files(folder)
    ]


def lineage_of(spec: dict[str, Any], run: RunSummary) -> dict[str, Any]:
    """What the model came from: each input by content (a shared folder by its path, which
    the platform does not hash; an earlier job's model by that job and the digest of its
    files' listing), and the precision it was trained in."""
    inputs = {name: _input_lineage(item) for name, item in (spec.get("inputs") or {}).items()}
    return {"inputs": inputs, "precision": run.precision, "allreduce_dtype": run.allreduce_dtype}


def _input_lineage(item: dict[str, Any]) -> dict[str, Any]:
    if "path" in item:
        return {"path": item["path"]}
    if "job" in item:
        return {"job": item["job"], "sha256": item["sha256"]}
    return {"dataset": f"{item['name']}@{item['version']}", "sha256": item["sha256"]}


def master_weights(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The state dict on the CPU, each tensor its own copy: safetensors refuses tensors that
    share memory (tied embeddings), and a copy of each keeps every key, so the file loads
    back with a strict `load_state_dict`."""
    return {
        name: tensor.detach().to("cpu", copy=True).contiguous() for name, tensor in state.items()
    }


def build_manifest(
    run_dir: RunDir,
    job: dict[str, Any],
    run: RunSummary,
    files: list[ExportedFile],
    outputs: list[ExportedFile],
    left_out: list[str],
) -> dict[str, Any]:
    spec = job["spec"]
    fallbacks = fallbacks_seen(run_dir, job)
    return {
        "format": MANIFEST_FORMAT,
        "job_id": job["job_id"],
        "attempt": job["attempt"],
        "created_at": datetime.now(UTC).isoformat(),
        "recipe": recipe_label(spec),
        "hyperparameters": run.hyperparameters,
        "spec": {**spec, "hyperparameters": run.hyperparameters},
        # Lineage: the other job's checkpoint this one started from (None: from scratch).
        "init_from": spec.get("init_from"),
        "precision": {
            "requested": spec["precision"],
            "effective": run.precision,
            "fallbacks": fallbacks["precision"],
        },
        "allreduce_dtype": {
            "requested": spec["allreduce_dtype"],
            "effective": run.allreduce_dtype,
            "fallbacks": fallbacks["allreduce_dtype"],
        },
        "world_size": run.world_size,
        "backend": run.backend,
        "metrics": run.metrics,
        "checkpoint": {"step": run.step, "name": checkpoint_name(run.step)},
        "files": {f.name: {"size": f.size, "sha256": f.sha256, **f.details} for f in files},
        "outputs": {f.name: {"size": f.size, "sha256": f.sha256} for f in outputs},
        "outputs_left_out": left_out,
        "versions": {**package_versions("ampfleet", "safetensors"), "torch": torch.__version__},
    }


def fallbacks_seen(run_dir: RunDir, job: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The fallback events of every attempt of the job, oldest first: from rank 0's records
    where the attempt's folder is on this node (this attempt's always is), else from the
    job's events the agent put into the job file (an attempt that ran on another node)."""
    seen: dict[str, list[dict[str, Any]]] = {"precision": [], "allreduce_dtype": []}
    runs_root, job_id = run_dir.path.parents[2], run_dir.path.parents[1].name
    recorded: dict[int, list[dict[str, Any]]] = {}
    for event in job.get("earlier_fallbacks", []):
        recorded.setdefault(int(event["attempt"]), []).append(event)
    for number in range(job["attempt"] + 1):
        events_file = RunDir.for_attempt(runs_root, job_id, number, 0).events_file
        if events_file.exists():
            found = [r for r in _records(events_file) if r.get("kind") == "event"]
        else:
            found = recorded.get(number, [])
        for record in found:
            what = FALLBACK_REASONS.get(str(record.get("reason")))
            if what:
                seen[what].append(
                    {"attempt": number, "time": record.get("time"), "message": record["message"]}
                )
    return seen


def _weights(
    path: Path,
    tensors: dict[str, torch.Tensor],
    dtype: str,
    job: dict[str, Any],
    run: RunSummary,
    lineage: dict[str, str],
) -> ExportedFile:
    from safetensors.torch import save_file  # at the run's end, not its start

    # safetensors metadata is str -> str; it travels with the file wherever it is copied.
    metadata = {
        "format": "pt",
        "job_id": job["job_id"],
        "recipe": recipe_label(job["spec"]),
        "step": str(run.step),
        "dtype": dtype,
        **lineage,
    }
    atomic_write(path, lambda tmp: save_file(tensors, str(tmp), metadata=metadata))
    parameters = sum(t.numel() for t in tensors.values())
    details = {"dtype": dtype, "tensors": len(tensors), "parameters": parameters, **lineage}
    return described(path, "model", path.name, details)


def _records(path: Path) -> Iterator[dict[str, Any]]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            yield record
