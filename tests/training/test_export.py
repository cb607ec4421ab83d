"""The model export of a completed run: the files, their records and the manifest."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file

from ampfleet.core.artifact_names import MANIFEST, MODEL, MODEL_BF16, is_valid_name
from ampfleet.workers.rundir import RecordReader, RecordWriter, RunDir
from ampfleet.workers.training.export import RunSummary, export_run


class Tied(torch.nn.Module):
    """Tied weights, as the GPT recipes have: safetensors refuses shared tensors as they are."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(5, 3)
        self.head = torch.nn.Linear(3, 5, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("calls", torch.tensor(7, dtype=torch.long))


def _job(export_dtype: str, **extra: object) -> dict[str, object]:
    spec = {
        "recipe": "digits",
        "hyperparameters": {"hidden": 8},
        "precision": "auto",
        "allreduce_dtype": "auto",
        "export": {"dtype": export_dtype},
    }
    return {"job_id": "job_x", "attempt": 1, "spec": spec, **extra}


def _run_dir(tmp_path: Path) -> RunDir:
    run_dir = RunDir.for_attempt(tmp_path / "runs", "job_x", 1, 0)
    run_dir.path.mkdir(parents=True)
    return run_dir


def _export(
    run_dir: RunDir, export_dtype: str, model: torch.nn.Module, **job: object
) -> list[dict[str, object]]:
    summary = RunSummary(
        step=30,
        metrics={"val_accuracy": 0.9},
        precision="bf16",
        allreduce_dtype="bf16",
        world_size=2,
        backend="gloo",
        hyperparameters={"hidden": 8, "learning_rate": 0.01},
    )
    writer = RecordWriter(run_dir.events_file, flush_s=3600)
    export_run(run_dir, _job(export_dtype, **job), model, summary, writer)
    writer.close()
    return [r for r in RecordReader(run_dir.events_file).read_new() if r["kind"] == "artifact"]


def test_export_writes_fp32_weights_that_load_back_strictly(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path)
    model = Tied()
    records = _export(run_dir, "fp32", model)

    assert [r["name"] for r in records] == [MODEL, MANIFEST]
    weights = load_file(str(run_dir.export_dir / MODEL))
    assert weights["embed.weight"].dtype == torch.float32
    fresh = Tied()
    fresh.load_state_dict(weights)  # strict: every key, tied ones included
    assert torch.equal(fresh.embed.weight, model.embed.weight)
    with safe_open(str(run_dir.export_dir / MODEL), "pt") as file:
        assert file.metadata()["precision"] == "bf16"
    assert not list(run_dir.export_dir.glob(".*"))  # no temporary file left


def test_manifest_has_the_lineage_and_the_sha256_of_each_file(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path)
    # The loop's own fallback event, as rank 0 records it; an earlier attempt's too.
    earlier = RunDir.for_attempt(tmp_path / "runs", "job_x", 0, 0)
    earlier.path.mkdir(parents=True)
    fallback = {"kind": "event", "reason": "precision_fallback", "message": "fp16 -> bf16"}
    earlier.events_file.write_text(json.dumps(fallback) + "\n")
    records = _export(run_dir, "bf16", Tied())

    assert [r["name"] for r in records] == [MODEL, MODEL_BF16, MANIFEST]
    assert load_file(str(run_dir.export_dir / MODEL_BF16))["embed.weight"].dtype == torch.bfloat16
    assert load_file(str(run_dir.export_dir / MODEL_BF16))["calls"].dtype == torch.long
    manifest = json.loads((run_dir.export_dir / MANIFEST).read_text())
    for name in (MODEL, MODEL_BF16):
        digest = hashlib.sha256((run_dir.export_dir / name).read_bytes()).hexdigest()
        assert manifest["files"][name]["sha256"] == digest
    assert manifest["precision"]["fallbacks"][0]["message"] == "fp16 -> bf16"
    assert manifest["precision"]["effective"] == "bf16"
    assert manifest["allreduce_dtype"] == {
        "requested": "auto",
        "effective": "bf16",
        "fallbacks": [],
    }
    assert manifest["checkpoint"] == {"step": 30, "name": "checkpoint-000000030"}
    assert manifest["metrics"] == {"val_accuracy": 0.9}
    # As the recipe's model resolved them, not as given: the spec said only `hidden`.
    assert manifest["hyperparameters"] == {"hidden": 8, "learning_rate": 0.01}
    assert manifest["spec"]["hyperparameters"] == manifest["hyperparameters"]
    assert set(manifest["versions"]) == {"python", "torch", "ampfleet", "safetensors"}
    assert all(r["step"] == 30 and r["artifact_kind"] == "model" for r in records)


def test_a_fallback_of_an_attempt_on_another_node_is_in_the_manifest(tmp_path: Path) -> None:
    """Attempt 0 ran elsewhere (no folder here): its fallback comes from the job file, which
    the agent fills from the job's events; this attempt's own comes from its records."""
    run_dir = _run_dir(tmp_path)
    elsewhere = {
        "attempt": 0,
        "time": 1.0,
        "reason": "allreduce_fallback",
        "message": "bf16 -> fp32: relative error 3e-3",
    }
    own = {"kind": "event", "reason": "precision_fallback", "message": "fp16 -> bf16", "time": 2}
    run_dir.events_file.write_text(json.dumps(own) + "\n")
    _export(run_dir, "fp32", Tied(), earlier_fallbacks=[elsewhere])

    manifest = json.loads((run_dir.export_dir / MANIFEST).read_text())
    assert manifest["allreduce_dtype"]["fallbacks"] == [
        {"attempt": 0, "time": 1.0, "message": "bf16 -> fp32: relative error 3e-3"}
    ]
    assert manifest["precision"]["fallbacks"] == [
        {"attempt": 1, "time": 2, "message": "fp16 -> bf16"}
    ]


def test_recipe_outputs_are_listed_and_links_and_odd_names_are_not(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path)
    outputs = run_dir.output_dir
    (outputs / "plots").mkdir(parents=True)
    (outputs / "plots" / "loss.png").write_bytes(b"png")
    (outputs / "bad name.txt").write_text("x")
    (outputs / "link").symlink_to(tmp_path / "elsewhere")
    records = _export(run_dir, "fp32", Tied())

    listed = [r for r in records if r["artifact_kind"] == "output"]
    assert [r["name"] for r in listed] == ["outputs/plots/loss.png"]
    manifest = json.loads((run_dir.export_dir / MANIFEST).read_text())
    assert manifest["outputs_left_out"] == [
        "bad name.txt: not a valid artifact name (letters, digits, . _ -)"
    ]


def test_artifact_names_refuse_traversal() -> None:
    for bad in ("../x", "a/../b", "/etc/passwd", "a//b", "a\\b", ".hidden", "a/", "", "x" * 256):
        assert not is_valid_name(bad), bad
    for good in ("model.safetensors", "checkpoint-000000100", "outputs/plots/loss.png"):
        assert is_valid_name(good)
