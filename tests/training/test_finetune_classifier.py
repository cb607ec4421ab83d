"""`finetune-classifier` on two gloo ranks in bf16 with a bf16 reduction: a tiny Llama-style
model, made here from a config, learns whether a string holds a `d` (half of them do) by full
fine-tuning from CSV with string labels and by LoRA from JSONL with integer labels, and a
tiny GPT-2-style one by LoRA from CSV, well past the majority class; the merged model,
loaded in a fresh process by transformers alone, carries the training file's labels and
scores the validation accuracy the job reported.
Refusals, checked where the node checks them before any rank imports torch: a folder that
is no model, an architecture transformers builds no classifier for, a row without its
label, a validation label the training file lacks."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from ampfleet.core.recipes import InputError, get_recipe
from tests.support.checkout_recipes import use_checkout_recipes
from tests.support.finetune_runs import classified, logs, records, run_job
from tests.support.hf_models import HAS, HAS_NOT, letter_task, tiny_model_folder

STEPS = 24
ALL_LINEAR = {
    "llama": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    "gpt2": ["c_attn", "c_proj", "c_fc"],
}
LEARNING_RATE = {"lora": 1e-2, "full": 2e-3}


@pytest.fixture(scope="module")
def pythonpath(tmp_path_factory: pytest.TempPathFactory) -> str:
    return use_checkout_recipes(tmp_path_factory.mktemp("site"))


def classifier_spec(method: str, steps: int = STEPS, style: str = "llama") -> dict[str, Any]:
    hyperparameters: dict[str, Any] = {
        "method": method,
        "learning_rate": LEARNING_RATE[method],
        "batch_size": 16,
        "max_seq_length": 16,
    }
    if method == "lora":
        hyperparameters["lora"] = {"r": 8, "alpha": 16, "target_modules": ALL_LINEAR[style]}
    return {
        "recipe": "finetune-classifier",
        "hyperparameters": hyperparameters,
        "resources": {"accelerator": "cpu", "procs_per_node": 2},
        "precision": "bf16",
        "allreduce_dtype": "bf16",
        "stop": {"max_steps": steps},
        "eval_every_steps": steps // 2,
        "log_every_steps": 10,
    }


@pytest.mark.slow  # a minute or two each on two busy cores
@pytest.mark.parametrize(
    ("style", "method", "suffix", "labels"),
    [
        ("llama", "full", ".csv", (HAS, HAS_NOT)),
        ("llama", "lora", ".jsonl", (1, 0)),
        ("gpt2", "lora", ".csv", (HAS, HAS_NOT)),
    ],
)
def test_a_tiny_model_learns_to_classify_and_its_merged_export_scores_the_reported_accuracy(
    tmp_path: Path, pythonpath: str, style: str, method: str, suffix: str, labels: tuple[Any, Any]
) -> None:
    base = tiny_model_folder(tmp_path / "base", style)
    train, validation = letter_task(tmp_path / "data", suffix, labels)
    inputs = {"model": base, "train": train, "validation": validation}
    run_dir = run_job(tmp_path, classifier_spec(method, style=style), inputs, pythonpath)
    assert run_dir.failures() == [], logs(run_dir)
    found = records(run_dir)
    assert found[-1]["kind"] == "finished", logs(run_dir)

    (started,) = [r for r in found if r["kind"] == "started"]
    assert (started["compute_dtype"], started["reduction_dtype"]) == ("bf16", "bf16")
    assert started["frozen_dtype"] == ("bf16" if method == "lora" else "none")
    evaluated = [r["values"] for r in found if "val_accuracy" in r.get("values", {})]
    assert len(evaluated) == 2  # halfway and at the end
    assert all("val_loss" in values for values in evaluated)
    reported = evaluated[-1]
    assert reported["val_accuracy"] >= 0.85, evaluated  # the majority class is 0.5

    manifest = json.loads((run_dir.export_dir / "manifest.json").read_text())
    lineage = manifest["lineage"]
    assert lineage["method"] == method
    assert lineage["labels"] == sorted(str(label) for label in labels)
    steps = [r["values"] for r in found if "allreduce_bytes" in r.get("values", {})]
    reduced = {values["allreduce_bytes"] for values in steps}
    assert reduced == {2 * lineage["trained_parameters"]}  # bf16 gradients of what trains
    if method == "lora":
        # The adapters and the new head (64 features x 2 classes), nothing else.
        assert lineage["trained_parameters"] < 0.3 * lineage["parameters"]
        assert (run_dir.export_dir / "hf" / "adapter" / "adapter_model.safetensors").is_file()

    scored = classified(run_dir.export_dir / "hf" / "merged", validation)
    assert scored["id2label"] == {str(i): name for i, name in enumerate(lineage["labels"])}
    # One example at a time and unpadded against the job's padded batches in bf16: a
    # borderline example may tip, so at most one of the 64 may differ.
    assert abs(scored["accuracy"] - reported["val_accuracy"]) <= 1 / scored["examples"]
    assert math.isclose(scored["loss"], reported["val_loss"], rel_tol=0.1), (scored, reported)


def test_a_row_without_its_label_fails_every_rank_before_they_meet(
    tmp_path: Path, pythonpath: str
) -> None:
    base = tiny_model_folder(tmp_path / "base")
    train = tmp_path / "train.csv"
    train.write_text("text,label\nabd,has-d\nabc\n")
    run_dir = run_job(
        tmp_path, classifier_spec("lora"), {"model": base, "train": train}, pythonpath
    )
    reasons = {f["message"] for f in run_dir.failures()}
    assert reasons == {
        'input \'train\': train.csv line 3: no "label" field (each row has a "text" string '
        'and a "label" string or integer)'
    }
    assert not (
        run_dir.events_file.exists() and any(r["kind"] == "started" for r in records(run_dir))
    )


def check_on_node(recipe: str, inputs: dict[str, Path]) -> InputError:
    definition = get_recipe(recipe)
    hyperparameters = definition.hyperparameters()
    with pytest.raises(InputError) as refused:
        definition.check_inputs(hyperparameters, inputs)
    return refused.value


@pytest.mark.parametrize(
    ("recipe", "model_type"), [("finetune-classifier", "codegen"), ("finetune-lm", "distilbert")]
)
@pytest.mark.usefixtures("pythonpath")
def test_an_architecture_transformers_has_no_model_for_the_task_is_refused(
    tmp_path: Path, recipe: str, model_type: str
) -> None:
    base = tiny_model_folder(tmp_path / "base")
    config = json.loads((base / "config.json").read_text())
    (base / "config.json").write_text(json.dumps({**config, "model_type": model_type}))
    train = tmp_path / "train.jsonl"
    train.write_text('{"text": "abd", "label": 1}\n{"text": "abc", "label": 0}\n')
    refused = check_on_node(recipe, {"model": base, "train": train})
    assert refused.name == "model"
    task = "SequenceClassification" if recipe == "finetune-classifier" else "CausalLM"
    assert refused.message.startswith(
        f"config.json: model_type {model_type!r} (architectures LlamaForCausalLM) is not one "
        f"transformers' AutoModelFor{task} loads"
    ), refused.message
    assert "llama" in refused.message


@pytest.mark.usefixtures("pythonpath")  # the checkout's recipes, finetune-classifier among them
def test_a_folder_that_is_no_model_or_labels_that_do_not_fit_are_refused(tmp_path: Path) -> None:
    train, _ = letter_task(tmp_path / "data")
    not_a_model = tmp_path / "notes"
    not_a_model.mkdir()
    (not_a_model / "README.md").write_text("weights elsewhere")
    refused = check_on_node("finetune-classifier", {"model": not_a_model, "train": train})
    assert (refused.name, refused.message) == (
        "model",
        "no config.json at the top of the dataset: upload a Hugging Face model folder "
        "(save_pretrained's: config.json, *.safetensors, tokenizer files) as it is",
    )
    base = tiny_model_folder(tmp_path / "base")
    other = tmp_path / "other.csv"
    other.write_text("text,label\nabd,maybe\n")
    refused = check_on_node(
        "finetune-classifier", {"model": base, "train": train, "validation": other}
    )
    assert refused.name == "validation"
    assert refused.message.startswith("other.csv: \"label\" 'maybe' is not a label of the training")
    single = tmp_path / "single.jsonl"
    single.write_text('{"text": "abd", "label": "x"}\n{"text": "abc", "label": "x"}\n')
    refused = check_on_node("finetune-classifier", {"model": base, "train": single})
    assert refused.message.startswith("single.jsonl: every row has the label 'x'")
    typed = tmp_path / "typed.jsonl"
    typed.write_text('{"text": "abd", "label": 1}\n{"text": 5, "label": 0}\n')
    refused = check_on_node("finetune-classifier", {"model": base, "train": typed})
    assert refused.message.startswith('typed.jsonl line 2: a wrong-typed "text" field')


@pytest.mark.usefixtures("pythonpath")
def test_a_base_without_a_padding_token_pads_with_its_eos(tmp_path: Path) -> None:
    """GPT-2's and Llama's own tokenizers have no padding token and their configs no
    pad_token_id: the classifier pads with the EOS and tells the model so, so a padded batch
    is classified from each text's own last token."""
    import torch
    from transformers import AutoTokenizer

    from ampfleet.workers.training.recipes.finetune_classifier import build
    from ampfleet.workers.training.task import RecipeContext

    base = tiny_model_folder(tmp_path / "base", "gpt2")
    tokenizer = AutoTokenizer.from_pretrained(base)
    tokenizer.pad_token = None
    tokenizer.save_pretrained(base)
    config = json.loads((base / "config.json").read_text())
    (base / "config.json").write_text(json.dumps({**config, "pad_token_id": None}))
    train, _ = letter_task(tmp_path / "data")
    definition = get_recipe("finetune-classifier")
    task = build(
        definition.hyperparameters(method="full"),
        RecipeContext(0, 1, torch.device("cpu"), 0, inputs={"model": base, "train": train}),
    )
    eos = tokenizer.eos_token_id
    assert task.model.config.pad_token_id == eos
    examples: list[Any] = list(task.train_dataset)
    short = next(e for e in examples if len(e[0]) == 3)
    long = max(examples, key=lambda e: len(e[0]))
    assert task.collate_fn is not None
    batch = task.collate_fn([short, long])
    assert batch["input_ids"][0, -1] == eos
    task.model.eval()
    with torch.no_grad():
        padded = task.model(**{k: batch[k] for k in ("input_ids", "attention_mask")}).logits
        alone = task.model(input_ids=torch.tensor([short[0]])).logits
    torch.testing.assert_close(padded[0], alone[0], rtol=1e-4, atol=1e-5)
