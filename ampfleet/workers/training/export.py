"""The model a SUCCEEDED job hands its user: `model.safetensors` and `manifest.json`.

Rank 0 writes them at the end of a completed run, into the attempt's export folder, and
appends one `artifact` record per file to its records; the node agent uploads them and lists
them. Ranks never talk to the store. safetensors rather than a pickle: loading it runs no
code, and every framework reads it. The weights are the fp32 master weights the optimizer
stepped (autocast only ever made half-precision copies of them); `export.dtype: bf16` adds a
bf16 rounding of the same weights. The manifest says how they came to be: recipe,
hyperparameters, the resolved spec, the precision and AllReduce dtype actually used with every
fallback this node saw, the final metrics, the checkpoint step, the sha256 of each file and the
versions of the packages that trained it.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch import nn

from ampfleet.core.artifact_names import (
    MANIFEST,
    MODEL,
    MODEL_BF16,
    checkpoint_name,
    is_valid_name,
    output_name,
)
from ampfleet.workers.rundir import FALLBACK_REASONS, RecordWriter, RunDir

MANIFEST_FORMAT = 1
# What the recipe leaves in its output folder is listed as it is; past these it is not
# (a runaway recipe must not turn into a million rows), and the manifest says what was left.
MAX_OUTPUT_FILES = 1000


@dataclass(frozen=True)
class RunSummary:
    """How the completed run ended, as the loop knows it."""

    step: int
    metrics: dict[str, float]
    precision: str
    allreduce_dtype: str
    world_size: int
    backend: str


@dataclass(frozen=True)
class ExportedFile:
    kind: str  # model | output
    name: str
    path: Path
    size: int
    sha256: str
    details: dict[str, Any]


def recipe_label(spec: dict[str, Any]) -> str:
    """What made the model: the registered recipe, or a bundle's entrypoint and content."""
    code = spec.get("code")
    if code:
        return f"{code['entrypoint']} (bundle {code['bundle']}, sha256 {code['sha256']})"
    return str(spec["recipe"])


def export_run(
    run_dir: RunDir,
    job: dict[str, Any],
    model: nn.Module,
    run: RunSummary,
    writer: RecordWriter,
    *,
    gathered: dict[str, torch.Tensor] | None = None,
) -> list[ExportedFile]:
    """Writes the export of a completed run (rank 0 only) and records each file as an
    artifact; returns what it wrote. `gathered`: a sharded model's whole state dict, which
    every rank took part in gathering (`ParallelModel.full_state_dict`)."""
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
    del master
    outputs, left_out = collect_outputs(run_dir.output_dir)
    manifest = build_manifest(run_dir, job, run, files, outputs, left_out)
    manifest_path = run_dir.export_dir / MANIFEST
    _atomic_write(manifest_path, lambda tmp: tmp.write_text(json.dumps(manifest, indent=2)))
    files.append(_described(manifest_path, "model", MANIFEST, {"format": MANIFEST_FORMAT}))
    for exported in [*outputs, *files]:
        writer.write(
            "artifact",
            artifact_kind=exported.kind,
            name=exported.name,
            paths=[str(exported.path)],
            step=run.step,
            details={**exported.details, "sha256": exported.sha256, "size": exported.size},
        )
    writer.flush()
    return [*outputs, *files]


def master_weights(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The state dict on the CPU, each tensor its own copy: safetensors refuses tensors that
    share memory (tied embeddings), and a copy of each keeps every key, so the file loads
    back with a strict `load_state_dict`."""
    return {
        name: tensor.detach().to("cpu", copy=True).contiguous() for name, tensor in state.items()
    }


def collect_outputs(output_dir: Path) -> tuple[list[ExportedFile], list[str]]:
    """The recipe's output files (regular files only: a link could name anything on the
    node), as `outputs/<relative path>`; and the paths not listed, with why."""
    found: list[ExportedFile] = []
    left_out: list[str] = []
    for path in _regular_files(output_dir):
        relative = path.relative_to(output_dir).as_posix()
        name = output_name(relative)
        if not is_valid_name(name):
            left_out.append(f"{relative}: not a valid artifact name (letters, digits, . _ -)")
        elif len(found) >= MAX_OUTPUT_FILES:
            left_out.append(f"{relative}: more than {MAX_OUTPUT_FILES} output files")
        else:
            found.append(_described(path, "output", name, {}))
    return found, left_out


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
        "hyperparameters": spec["hyperparameters"],
        "spec": spec,
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
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "ampfleet": version("ampfleet"),
            "safetensors": version("safetensors"),
        },
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
    # safetensors metadata is str -> str; it travels with the file wherever it is copied.
    metadata = {
        "format": "pt",
        "job_id": job["job_id"],
        "recipe": recipe_label(job["spec"]),
        "step": str(run.step),
        "dtype": dtype,
        **lineage,
    }
    _atomic_write(path, lambda tmp: save_file(tensors, str(tmp), metadata=metadata))
    parameters = sum(t.numel() for t in tensors.values())
    details = {"dtype": dtype, "tensors": len(tensors), "parameters": parameters, **lineage}
    return _described(path, "model", path.name, details)


def _described(path: Path, kind: str, name: str, details: dict[str, Any]) -> ExportedFile:
    return ExportedFile(kind, name, path, path.stat().st_size, sha256_of(path), details)


def sha256_of(path: Path) -> str:
    with path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def _atomic_write(path: Path, write: Callable[[Path], object]) -> None:
    """Written under a temporary name, fsynced, renamed: the agent never uploads half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    descriptor = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    tmp.replace(path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def _regular_files(root: Path) -> Iterator[Path]:
    if not root.is_dir():
        return
    for directory, subdirectories, names in os.walk(root):  # os.walk follows no links
        subdirectories.sort()
        for name in sorted(names):
            path = Path(directory, name)
            if path.is_file() and not path.is_symlink():
                yield path


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
