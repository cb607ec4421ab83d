"""Fine-tuning end to end, with real processes: a tiny Llama-style model folder and the echo
task's JSONL files uploaded as datasets, a `finetune-lm` LoRA job on two gloo ranks in
bf16, and the merged model downloaded as a folder that transformers loads as it is and that
scores the validation loss the job reported; the manifest names the inputs it came from.
And a `finetune-classifier` LoRA job from a CSV file with string labels, whose merged model
classifies the validation set at the accuracy the job reported."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ampfleet.sdk import Client
from tests.support.checkout_recipes import install_checkout_recipes
from tests.support.finetune_runs import classified, scored
from tests.support.fleet import FleetFactory
from tests.support.hf_models import echo_task, letter_task, tiny_model_folder

pytestmark = pytest.mark.e2e


@pytest.mark.slow  # a fleet and a fine-tuning run: minutes on two busy cores
def test_a_model_folder_and_jsonl_in_a_merged_model_out(
    make_fleet: FleetFactory, tmp_path: Path
) -> None:
    fleet = make_fleet(
        "embedded", extra_env={"PYTHONPATH": install_checkout_recipes(tmp_path / "site")}
    )
    base = tiny_model_folder(tmp_path / "base")
    train, validation = echo_task(tmp_path / "data")
    with Client(fleet.base_url, fleet.admin_key) as client:
        model = client.upload_dataset("tiny-llama", base)
        client.upload_dataset("echo", train)
        client.upload_dataset("echo-validation", validation)
        job = client.submit(
            {
                "recipe": "finetune-lm",
                "inputs": {
                    "model": "tiny-llama@1",
                    "train": "echo@1",
                    "validation": "echo-validation",
                },
                "hyperparameters": {
                    "method": "lora",
                    "learning_rate": 2e-2,
                    "batch_size": 16,
                    "max_seq_length": 32,
                    "lora": {"target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]},
                },
                "resources": {"accelerator": "cpu", "procs_per_node": 2},
                "precision": "bf16",
                "allreduce_dtype": "bf16",
                "stop": {"max_steps": 30},
            }
        )
        done = fleet.wait_for_state(job.id, {"SUCCEEDED", "FAILED"}, timeout=600)
        assert done["state"] == "SUCCEEDED", done.get("failure_reason")
        client.download(job.id, "hf/merged/", to=tmp_path / "out")
        client.download(job.id, "model", to=tmp_path / "out")
    merged = tmp_path / "out" / "hf" / "merged"
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {
        p.name for p in merged.iterdir()
    }
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["lineage"]["inputs"]["model"]["sha256"] == model.sha256
    assert manifest["lineage"]["method"] == "lora"
    reported = manifest["metrics"]["val_loss"]
    before, after = scored(validation, [(base, None), (merged, None)])
    assert reported < 0.7 * before, (before, reported)
    assert math.isclose(after, reported, rel_tol=0.03), (after, reported)


@pytest.mark.slow  # a fleet and a fine-tuning run: minutes on two busy cores
def test_a_model_folder_and_a_labelled_csv_in_a_classifier_out(
    make_fleet: FleetFactory, tmp_path: Path
) -> None:
    fleet = make_fleet(
        "embedded", extra_env={"PYTHONPATH": install_checkout_recipes(tmp_path / "site")}
    )
    base = tiny_model_folder(tmp_path / "base")
    train, validation = letter_task(tmp_path / "data")
    with Client(fleet.base_url, fleet.admin_key) as client:
        client.upload_dataset("tiny-llama", base)
        client.upload_dataset("letters", train)
        client.upload_dataset("letters-validation", validation)
        job = client.submit(
            {
                "recipe": "finetune-classifier",
                "inputs": {
                    "model": "tiny-llama@1",
                    "train": "letters@1",
                    "validation": "letters-validation",
                },
                "hyperparameters": {
                    "method": "lora",
                    "learning_rate": 1e-2,
                    "batch_size": 16,
                    "max_seq_length": 16,
                    "lora": {"target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]},
                },
                "resources": {"accelerator": "cpu", "procs_per_node": 2},
                "precision": "bf16",
                "allreduce_dtype": "bf16",
                "stop": {"max_steps": 40},
            }
        )
        done = fleet.wait_for_state(job.id, {"SUCCEEDED", "FAILED"}, timeout=600)
        assert done["state"] == "SUCCEEDED", done.get("failure_reason")
        client.download(job.id, "hf/merged/", to=tmp_path / "out")
        client.download(job.id, "model", to=tmp_path / "out")
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["lineage"]["labels"] == ["has-d", "no-d"]
    reported = manifest["metrics"]
    assert reported["val_accuracy"] >= 0.85, reported  # the majority class is 0.5
    found = classified(tmp_path / "out" / "hf" / "merged", validation)
    assert found["id2label"] == {"0": "has-d", "1": "no-d"}
    # One example at a time, unpadded, against the job's padded bf16 batches: at most one
    # borderline example of the 64 may tip.
    assert abs(found["accuracy"] - reported["val_accuracy"]) <= 1 / found["examples"], (
        found,
        reported,
    )
