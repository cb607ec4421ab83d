"""Fine-tuning end to end, with real processes: a tiny Llama-style model folder and the echo
task's JSONL files uploaded as datasets, a `finetune-lm` LoRA job on two gloo ranks in
bf16, and the merged model downloaded as a folder that transformers loads as it is and that
scores the validation loss the job reported; the manifest names the inputs it came from.
One of its checkpoints exported as a model of its own, and its model fine-tuned again. And
a `finetune-classifier` LoRA job from a CSV file with string labels, whose merged model
classifies the validation set at the accuracy the job reported. In the short tier: a few
steps of one rank, whose samples and checkpoints (with their metrics) the API lists."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ampfleet.sdk import Client
from tests.support.checkout_recipes import install_checkout_recipes
from tests.support.finetune_runs import classified, merged_dtype, scored
from tests.support.fleet import Fleet, FleetFactory
from tests.support.hf_models import echo_task, letter_task, tiny_model_folder

pytestmark = pytest.mark.e2e


def fine_tuning_fleet(make_fleet: FleetFactory, tmp_path: Path) -> Fleet:
    """An embedded fleet whose processes see this checkout's recipes."""
    return make_fleet(
        "embedded", extra_env={"PYTHONPATH": install_checkout_recipes(tmp_path / "site")}
    )


def test_a_few_steps_list_their_samples_and_checkpoints_with_their_metrics(
    make_fleet: FleetFactory, tmp_path: Path
) -> None:
    fleet = fine_tuning_fleet(make_fleet, tmp_path)
    base = tiny_model_folder(tmp_path / "base")
    train, validation = echo_task(tmp_path / "data", train=32, validation=8)
    with Client(fleet.base_url, fleet.admin_key) as client:
        client.upload_dataset("tiny-llama", base)
        client.upload_dataset("echo", train)
        client.upload_dataset("echo-validation", validation)
        job = client.submit(
            {
                "recipe": "finetune-lm",
                "inputs": {"model": "tiny-llama", "train": "echo", "validation": "echo-validation"},
                "hyperparameters": {
                    "batch_size": 8,
                    "max_seq_length": 16,
                    "sample_prompts": ["echo abc:"],
                    "sample_max_new_tokens": 4,
                },
                "resources": {"accelerator": "cpu", "procs_per_node": 1},
                "precision": "bf16",
                "stop": {"max_steps": 4},
                "eval_every_steps": 2,
                "checkpoint": {"every_steps": 2, "keep_last": 2},
                "export": {"dtype": "bf16"},
            }
        )
        done = fleet.wait_for_state(job.id, {"SUCCEEDED", "FAILED"}, timeout=300)
        assert done["state"] == "SUCCEEDED", done.get("failure_reason")
        samples = client.samples(job.id)
        checkpoints = client.checkpoints(job.id)
        client.download(job.id, "hf/merged/model.safetensors", to=tmp_path / "out")
    assert [s.step for s in samples] == [2, 4]
    for sample in samples:
        assert sample.text.startswith("### prompt\necho abc:\n### completion\n"), sample.text
    series = fleet.http.get(f"/v1/jobs/{job.id}/metrics").json()["series"]
    validated = {
        p["step"]: p["value"] for s in series if s["name"] == "val_loss" for p in s["points"]
    }
    listed = [(c.step, c.metrics["val_loss"]) for c in checkpoints]
    # Each checkpoint the job keeps (keep_last 2: both) is stored, with its step's validation
    # loss, however far behind the node's upload thread was (workers/uploads.py).
    assert listed == sorted(validated.items()), (listed, validated)
    assert merged_dtype(tmp_path / "out" / "hf" / "merged") == "BF16"


@pytest.mark.slow  # a fleet and a fine-tuning run: minutes on two busy cores
def test_a_model_folder_and_jsonl_in_a_merged_model_out(
    make_fleet: FleetFactory, tmp_path: Path
) -> None:
    fleet = fine_tuning_fleet(make_fleet, tmp_path)
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
                "eval_every_steps": 15,
                "checkpoint": {"every_steps": 15},
            }
        )
        done = fleet.wait_for_state(job.id, {"SUCCEEDED", "FAILED"}, timeout=600)
        assert done["state"] == "SUCCEEDED", done.get("failure_reason")
        client.download(job.id, "hf/merged/", to=tmp_path / "out")
        client.download(job.id, "model", to=tmp_path / "out")
        halfway = client.checkpoints(job.id)[0]
        # The checkpoint of step 15 exported as a model of its own: 0 steps from its weights.
        export = client.export_checkpoint(job.id, halfway.step)
        exported = fleet.wait_for_state(export.id, {"SUCCEEDED", "FAILED"}, timeout=600)
        assert exported["state"] == "SUCCEEDED", exported.get("failure_reason")
        client.download(export.id, "hf/merged/", to=tmp_path / "step-15")
        client.download(export.id, "model", to=tmp_path / "step-15")
        # The fine-tuned model fine-tuned again: a job's model as the base.
        again = client.submit(
            {
                "recipe": "finetune-lm",
                "inputs": {
                    "model": f"job:{job.id}",
                    "train": "echo",
                    "validation": "echo-validation",
                },
                "hyperparameters": {"learning_rate": 1e-6, "batch_size": 16, "max_seq_length": 32},
                "resources": {"accelerator": "cpu", "procs_per_node": 1},
                "precision": "bf16",
                "stop": {"max_steps": 2},
            }
        )
        second = fleet.wait_for_state(again.id, {"SUCCEEDED", "FAILED"}, timeout=600)
        assert second["state"] == "SUCCEEDED", second.get("failure_reason")
        client.download(again.id, "model", to=tmp_path / "again")
    merged = tmp_path / "out" / "hf" / "merged"
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {
        p.name for p in merged.iterdir()
    }
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["lineage"]["inputs"]["model"]["sha256"] == model.sha256
    assert manifest["lineage"]["method"] == "lora"
    reported = manifest["metrics"]["val_loss"]
    before, after, at_15 = scored(
        validation, [(base, None), (merged, None), (tmp_path / "step-15" / "hf" / "merged", None)]
    )
    assert reported < 0.7 * before, (before, reported)
    assert math.isclose(after, reported, rel_tol=0.03), (after, reported)

    # The export evaluated the checkpoint's weights as the job did at step 15.
    export_manifest = json.loads((tmp_path / "step-15" / "manifest.json").read_text())
    assert export_manifest["init_from"]["job"] == job.id
    assert export_manifest["init_from"]["step"] == 15
    assert export_manifest["checkpoint"]["step"] == 0
    evaluated = export_manifest["metrics"]["val_loss"]
    assert math.isclose(evaluated, halfway.metrics["val_loss"], rel_tol=0.01), (evaluated, halfway)
    assert math.isclose(at_15, evaluated, rel_tol=0.03), (at_15, evaluated)
    # The second fine-tune started where the first ended, and says so.
    again_manifest = json.loads((tmp_path / "again" / "manifest.json").read_text())
    assert again_manifest["lineage"]["inputs"]["model"]["job"] == job.id
    continued = again_manifest["metrics"]["val_loss"]
    assert math.isclose(continued, reported, rel_tol=0.05), (continued, reported)


@pytest.mark.slow  # a fleet and a fine-tuning run: minutes on two busy cores
def test_a_model_folder_and_a_labelled_csv_in_a_classifier_out(
    make_fleet: FleetFactory, tmp_path: Path
) -> None:
    fleet = fine_tuning_fleet(make_fleet, tmp_path)
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
