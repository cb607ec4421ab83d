"""`finetune-lm` on two gloo ranks in bf16 with a bf16 reduction: a tiny Llama-style and a
tiny GPT-2-style model, made here from a config, learn the echo task by LoRA and by full
fine-tuning; the merged model and the adapter, loaded in a fresh process by transformers
and peft alone, score the validation loss the job reported. LoRA reduces the adapters'
gradients only, with the base held in bf16."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from ampfleet.workers.rundir import RunDir
from tests.support.checkout_recipes import use_checkout_recipes
from tests.support.finetune_runs import (
    logs,
    merged_dtype,
    records,
    run_job,
    scored,
    sha256_of,
)
from tests.support.hf_models import echo_task, tiny_model_folder

STEPS = 40
ALL_LINEAR = {
    "llama": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    "gpt2": ["c_attn", "c_proj", "c_fc"],
}
LEARNING_RATE = {"lora": 2e-2, "full": 4e-3}


@pytest.fixture(scope="module")
def pythonpath(tmp_path_factory: pytest.TempPathFactory) -> str:
    return use_checkout_recipes(tmp_path_factory.mktemp("site"))


def finetune_spec(
    method: str, style: str, steps: int = STEPS, strategy: str = "ddp", dtype: str = "fp32"
) -> dict[str, Any]:
    hyperparameters: dict[str, Any] = {
        "method": method,
        "learning_rate": LEARNING_RATE[method],
        "batch_size": 16,
        "max_seq_length": 32,
        "sample_prompts": ["echo abca:"],
        "sample_max_new_tokens": 6,
    }
    if method == "lora":
        hyperparameters["lora"] = {"r": 8, "alpha": 16, "target_modules": ALL_LINEAR[style]}
    return {
        "recipe": "finetune-lm",
        "hyperparameters": hyperparameters,
        "resources": {"accelerator": "cpu", "procs_per_node": 2},
        "precision": "bf16",
        "allreduce_dtype": "bf16",
        "stop": {"max_steps": steps},
        "eval_every_steps": steps // 2,
        "log_every_steps": 10,
        "parallelism": {"strategy": strategy},
        "export": {"dtype": dtype},
    }


@pytest.mark.slow  # a minute or two each on two busy cores
@pytest.mark.parametrize(
    ("style", "method", "strategy", "dtype"),
    [
        ("llama", "lora", "ddp", "fp32"),
        ("llama", "full", "ddp", "fp32"),
        ("gpt2", "lora", "ddp", "fp32"),
        ("gpt2", "full", "ddp", "fp32"),
        # The frozen bf16 base and the fp32 adapters sharded in one FSDP unit per block.
        ("llama", "lora", "fsdp", "bf16"),
        ("gpt2", "full", "fsdp", "bf16"),  # its tied embedding and head in the root unit
    ],
)
def test_a_tiny_model_learns_and_its_hugging_face_export_scores_the_reported_loss(
    tmp_path: Path, pythonpath: str, style: str, method: str, strategy: str, dtype: str
) -> None:
    base = tiny_model_folder(tmp_path / "base", style)
    train, validation = echo_task(tmp_path / "data")
    inputs = {"model": base, "train": train, "validation": validation}
    spec = finetune_spec(method, style, strategy=strategy, dtype=dtype)
    run_dir = run_job(tmp_path, spec, inputs, pythonpath)
    assert run_dir.failures() == [], logs(run_dir)
    found = records(run_dir)
    assert found[-1]["kind"] == "finished", logs(run_dir)

    (started,) = [r for r in found if r["kind"] == "started"]
    assert started["strategy"] == strategy
    assert (started["compute_dtype"], started["reduction_dtype"]) == ("bf16", "bf16")
    assert started["frozen_dtype"] == ("bf16" if method == "lora" else "none")
    validated = [r["values"]["val_loss"] for r in found if "val_loss" in r.get("values", {})]
    assert len(validated) == 2  # halfway and at the end
    hf = run_dir.export_dir / "hf"
    adapter = hf / "adapter" if method == "lora" else None
    before, merged, adapted = scored(
        validation, [(base, None), (hf / "merged", None), (base, adapter)]
    )
    assert validated[-1] < 0.5 * before, (before, validated)

    manifest = json.loads((run_dir.export_dir / "manifest.json").read_text())
    lineage = manifest["lineage"]
    assert lineage["method"] == method
    assert lineage["precision"] == "bf16"
    assert lineage["inputs"]["model"] == {"path": str(base)}
    assert lineage["inputs"]["train"]["sha256"] == sha256_of(train)
    assert lineage["inputs"]["validation"]["sha256"] == sha256_of(validation)
    # Every trained parameter's gradient crosses the wire in bf16, and nothing else does.
    steps = [r["values"] for r in found if "allreduce_bytes" in r.get("values", {})]
    reduced = {values["allreduce_bytes"] for values in steps}
    assert reduced == {2 * lineage["trained_parameters"]}
    if method == "lora":
        assert lineage["trained_parameters"] < 0.3 * lineage["parameters"]
    else:
        assert lineage["trained_parameters"] == lineage["parameters"]

    listed = {r["name"] for r in found if r.get("artifact_kind") == "model"}
    assert {"model.safetensors", "manifest.json", "hf/merged/model.safetensors"} <= listed
    assert set(manifest["files"]) == listed - {"manifest.json"}
    assert math.isclose(merged, validated[-1], rel_tol=0.03), (merged, validated[-1])
    if method == "lora":
        assert "hf/adapter/adapter_model.safetensors" in listed
        assert math.isclose(adapted, merged, rel_tol=0.01), (adapted, merged)
    samples = (run_dir.output_dir / "samples.txt").read_text()
    assert samples.startswith("### prompt\necho abca:\n### completion\n"), samples
    # Each evaluation's samples, an artifact of its step; the last one's model is the
    # merged model's, so it completes the prompt alike.
    evaluated = [r for r in found if r.get("artifact_kind") == "sample"]
    assert [(r["name"], r["step"]) for r in evaluated] == [
        ("samples/step-000000020.txt", 20),
        ("samples/step-000000040.txt", 40),
    ]
    last = Path(evaluated[-1]["paths"][0]).read_text()
    assert last.startswith("### prompt\necho abca:\n### completion\n"), last
    assert merged_dtype(hf / "merged") == {"fp32": "F32", "bf16": "BF16"}[dtype]
    assert lineage["merged_dtype"] == dtype


def test_a_record_without_its_field_fails_every_rank_before_they_meet(
    tmp_path: Path, pythonpath: str
) -> None:
    base = tiny_model_folder(tmp_path / "base")
    train = tmp_path / "train.jsonl"
    train.write_text('{"prompt": "a", "completion": "b"}\n{"prompt": "c"}\n')
    run_dir = run_job(
        tmp_path, finetune_spec("lora", "llama"), {"model": base, "train": train}, pythonpath
    )
    reasons = {f["message"] for f in run_dir.failures()}
    assert reasons == {
        "input 'train': train.jsonl line 2: no \"completion\" field (each line is "
        '{"prompt": ..., "completion": ...} or {"text": ...})'
    }
    assert not _started(run_dir)


def test_a_folder_of_an_architecture_it_does_not_train_is_refused_on_the_node(
    tmp_path: Path, pythonpath: str
) -> None:
    base = tiny_model_folder(tmp_path / "base")
    config = json.loads((base / "config.json").read_text())
    (base / "config.json").write_text(json.dumps({**config, "model_type": "t5"}))
    train, _ = echo_task(tmp_path / "data")
    run_dir = run_job(
        tmp_path, finetune_spec("lora", "llama"), {"model": base, "train": train}, pythonpath
    )
    (message,) = {f["message"] for f in run_dir.failures()}
    assert message.startswith(
        "input 'model': config.json: model_type 't5' (architectures LlamaForCausalLM) is not "
        "one transformers' AutoModelForCausalLM loads"
    ), message
    assert "llama" in message


def _started(run_dir: RunDir) -> bool:
    return run_dir.events_file.exists() and any(r["kind"] == "started" for r in records(run_dir))
