"""A fine-tuning job's inputs at submit: what the datasets' stored file lists tell (a folder
without a config, weights only in a pickle, no tokenizer, data that is not JSONL, an input
left out) and what their uploads read of them (an architecture transformers has no model
of the task for, a config that is no JSON, a JSONL line or a CSV row without its field) is
a 422 naming the input, the file and the field; a model folder and a JSONL file are
accepted. Nothing is unpacked or read at submit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from ampfleet.core.db import session_scope
from ampfleet.core.models import Dataset, Job
from ampfleet.core.settings import get_settings
from ampfleet.recipes import finetune_inputs
from ampfleet.workers.inputs import ensure_inputs, local_path
from tests.conftest import KeyFactory
from tests.support.clients import keyed
from tests.support.datasets import MODEL_FOLDER, TRAIN, folder, upload
from tests.support.factories import add_artifact, job_spec


def submit(client: TestClient, inputs: dict[str, str]) -> Any:
    spec = {"recipe": "finetune-lm", "project": "alpha", "inputs": inputs}
    return client.post("/v1/jobs", json=spec)


@pytest.mark.parametrize(
    ("left_out", "added", "words"),
    [
        ("config.json", {}, "no config.json at the top of the dataset"),
        (
            "model.safetensors",
            {"pytorch_model.bin": b"pickle"},
            "no *.safetensors weights at the top of the dataset (pytorch_model.bin is a pickle",
        ),
        ("tokenizer.json", {}, "no tokenizer (tokenizer.json or tokenizer.model or vocab.json)"),
    ],
)
def test_a_dataset_that_is_no_model_folder_is_422_naming_the_file(
    writer: TestClient, left_out: str, added: dict[str, bytes], words: str
) -> None:
    files = {k: v for k, v in MODEL_FOLDER.items() if k != left_out} | added
    train = upload(writer, TRAIN, name="pairs", filename="train.jsonl").json()
    refused = submit(
        writer, {"model": folder(writer, "base", files), "train": f"pairs@{train['version']}"}
    )
    assert refused.status_code == 422, refused.text
    (detail,) = refused.json()["error"]["details"]
    assert detail["field"] == "inputs.model"
    assert detail["message"].startswith(words), detail


def test_data_that_is_not_jsonl_or_an_input_left_out_is_422(writer: TestClient) -> None:
    model = folder(writer, "base", MODEL_FOLDER)
    upload(writer, b"text,label\n", name="table", filename="train.csv")
    refused = submit(writer, {"model": model, "train": "table@1"})
    assert refused.status_code == 422
    assert refused.json()["error"]["details"] == [
        {
            "field": "inputs.train",
            "message": "expected one .jsonl file, found train.csv",
            "type": None,
        }
    ]
    missing = submit(writer, {"model": model})
    assert missing.status_code == 422
    assert missing.json()["error"]["details"][0]["field"] == "inputs.train"
    assert "required" in missing.json()["error"]["message"]


def test_a_model_folder_and_a_jsonl_file_are_accepted(writer: TestClient) -> None:
    upload(writer, TRAIN, name="pairs", filename="train.jsonl")
    accepted = submit(writer, {"model": folder(writer, "base", MODEL_FOLDER), "train": "pairs"})
    assert accepted.status_code == 202, accepted.text
    assert accepted.json()["spec"]["hyperparameters"]["method"] == "lora"


def test_a_classifier_takes_csv_or_jsonl_and_refuses_other_data_or_no_model(
    writer: TestClient,
) -> None:
    model = folder(writer, "base", MODEL_FOLDER)
    upload(writer, b"text,label\nabd,yes\n", name="table", filename="train.csv")
    upload(writer, b'{"text": "abd", "label": 1}\n', name="lines", filename="train.jsonl")
    upload(writer, b"abd yes\n", name="words", filename="train.txt")
    for data in ("table", "lines"):
        spec = {"recipe": "finetune-classifier", "project": "alpha"}
        accepted = writer.post("/v1/jobs", json={**spec, "inputs": {"model": model, "train": data}})
        assert accepted.status_code == 202, accepted.text
    spec = {"recipe": "finetune-classifier", "project": "alpha"}
    refused = writer.post("/v1/jobs", json={**spec, "inputs": {"model": model, "train": "words"}})
    assert refused.status_code == 422
    assert refused.json()["error"]["details"][0] == {
        "field": "inputs.train",
        "message": "expected one .csv or .jsonl file, found train.txt",
        "type": None,
    }
    no_model = folder(writer, "notes", {"README.md": b"weights elsewhere"})
    refused = writer.post(
        "/v1/jobs", json={**spec, "inputs": {"model": no_model, "train": "table"}}
    )
    assert refused.status_code == 422
    (detail,) = refused.json()["error"]["details"]
    assert detail["field"] == "inputs.model"
    assert detail["message"].startswith("no config.json at the top of the dataset")


def test_a_base_model_of_another_project_is_422(
    writer: TestClient, app: FastAPI, make_key: KeyFactory
) -> None:
    with keyed(app, make_key("beta", "write")) as other:
        folder(other, "their-base", MODEL_FOLDER)
    upload(writer, b"text,label\nabd,yes\n", name="table", filename="train.csv")
    for recipe in ("finetune-lm", "finetune-classifier"):
        spec = {"recipe": recipe, "project": "alpha"}
        inputs = {"model": "their-base@1", "train": "table"}
        refused = writer.post("/v1/jobs", json={**spec, "inputs": inputs})
        assert refused.status_code == 422, refused.text
        (detail,) = refused.json()["error"]["details"]
        assert detail == {
            "field": "inputs.model",
            "message": "version 1 of dataset their-base not found in project alpha "
            "(POST /v1/datasets uploads one)",
            "type": None,
        }


PAIR_FORMAT = '(each line is {"prompt": ..., "completion": ...} or {"text": ...})'
ROW_FORMAT = '(each row has a "text" string and a "label" string or integer)'


def refusal(answered: Any) -> tuple[str, str]:
    assert answered.status_code == 422, answered.text
    (detail,) = answered.json()["error"]["details"]
    return detail["field"], detail["message"]


def test_the_architecture_and_the_datas_fields_are_422s_at_submit(writer: TestClient) -> None:
    t5 = {**MODEL_FOLDER, "config.json": b'{"model_type": "t5", "architectures": ["T5Model"]}'}
    upload(writer, TRAIN, name="pairs", filename="train.jsonl")
    field, message = refusal(submit(writer, {"model": folder(writer, "t5", t5), "train": "pairs"}))
    assert field == "inputs.model"
    assert message.startswith(
        "config.json: model_type 't5' (architectures T5Model) is not one transformers' "
        "AutoModelForCausalLM loads, as this recipe needs ("
    ), message
    broken = {**MODEL_FOLDER, "config.json": b"{model_type: llama"}
    field, message = refusal(
        submit(writer, {"model": folder(writer, "broken", broken), "train": "pairs"})
    )
    assert (field, message.split(" (")[0]) == ("inputs.model", "config.json does not read as JSON")

    model = folder(writer, "base", MODEL_FOLDER)
    for data, words in (
        # The words the ranks say of the same file (tests/training/test_finetune_lm.py).
        (TRAIN + b'{"prompt": "c"}\n', f'train.jsonl line 2: no "completion" field {PAIR_FORMAT}'),
        (
            b'{"text": "ab"}\n\n{"text": 3}\n',
            f'train.jsonl line 3: a non-string "text" field {PAIR_FORMAT}',
        ),
        (b'{"text": "ab"}\n[1, 2]\n{"text": 3}\n', "train.jsonl line 2: not a JSON object"),
        (b"\n\n", "train.jsonl holds no examples"),
    ):
        dataset = upload(writer, data, name="lines", filename="train.jsonl").json()
        inputs = {"model": model, "train": "pairs", "validation": f"lines@{dataset['version']}"}
        assert refusal(submit(writer, inputs)) == ("inputs.validation", words)

    # What the upload read is the dataset's summary.
    summary = upload(writer, TRAIN, name="pairs", filename="train.jsonl").json()["summary"]
    assert summary["records"] == {
        "kind": "jsonl",
        "file": "train.jsonl",
        "problem": None,
        "records": 1,
        "shapes": [{"fields": {"prompt": "string", "completion": "string"}, "line": 1}],
        "complete": True,
    }


def test_a_classifiers_csv_and_jsonl_fields_are_422s_at_submit(writer: TestClient) -> None:
    model = folder(writer, "base", MODEL_FOLDER)
    spec = {"recipe": "finetune-classifier", "project": "alpha"}
    for filename, data, words in (
        (
            "train.csv",
            b"text,category\nabd,yes\n",
            'train.csv: no "label" column (the header row names text and label; it has '
            "text, category)",
        ),
        (
            "train.csv",
            b"text,label\nabd,yes\n,no\nabc,\n",
            f'train.csv line 4: no "label" field {ROW_FORMAT}',
        ),
        (
            "train.jsonl",
            b'{"text": "abd", "label": 1}\n{"text": "abc", "label": true}\n',
            f'train.jsonl line 2: a wrong-typed "label" field {ROW_FORMAT}',
        ),
    ):
        dataset = upload(writer, data, name="rows", filename=filename).json()
        inputs = {"model": model, "train": f"rows@{dataset['version']}"}
        answered = writer.post("/v1/jobs", json={**spec, "inputs": inputs})
        assert refusal(answered) == ("inputs.train", words)
    # An architecture transformers has a causal LM of but no sequence classifier.
    codegen = {**MODEL_FOLDER, "config.json": b'{"model_type": "codegen"}'}
    inputs = {"model": folder(writer, "codegen", codegen), "train": "rows@1"}
    field, message = refusal(writer.post("/v1/jobs", json={**spec, "inputs": inputs}))
    assert field == "inputs.model"
    assert message.startswith(
        "config.json: model_type 'codegen' is not one transformers' "
        "AutoModelForSequenceClassification loads"
    ), message


def test_what_submit_cannot_tell_is_left_to_the_nodes(
    writer: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dataset uploaded before summaries, and an API host without transformers: the job is
    accepted, and the ranks check the file and the architecture (test_finetune_lm.py)."""
    bad = upload(writer, TRAIN + b'{"prompt": "c"}\n', name="old", filename="train.jsonl").json()
    with session_scope() as session:
        row = session.get(Dataset, bad["id"])
        assert row is not None
        row.summary = None
    model = folder(writer, "base", MODEL_FOLDER)
    accepted = submit(writer, {"model": model, "train": "old"})
    assert accepted.status_code == 202, accepted.text

    t5 = {**MODEL_FOLDER, "config.json": b'{"model_type": "t5"}'}
    model = folder(writer, "t5", t5)
    upload(writer, TRAIN, name="pairs", filename="train.jsonl")
    assert submit(writer, {"model": model, "train": "pairs"}).status_code == 422
    monkeypatch.setattr(finetune_inputs, "transformers_folder", lambda: None)
    accepted = submit(writer, {"model": model, "train": "pairs"})
    assert accepted.status_code == 202, accepted.text


def succeeded_with_model(
    client: TestClient, tmp_path: Path, files: dict[str, bytes], project: str = "alpha"
) -> str:
    """A job of `project` that SUCCEEDED and lists `files` as its hf/merged/ model."""
    job = client.post("/v1/jobs", json={**job_spec(), "project": project}).json()
    for name, data in files.items():
        add_artifact(tmp_path, job, f"hf/merged/{name}", "model", data, 20)
    with session_scope() as session:
        row = session.get(Job, job["id"])
        assert row is not None
        row.state = "SUCCEEDED"
    return str(job["id"])


def test_an_earlier_jobs_model_is_a_base_by_its_id(
    writer: TestClient, app: FastAPI, make_key: KeyFactory, tmp_path: Path
) -> None:
    parent = succeeded_with_model(writer, tmp_path, MODEL_FOLDER)
    upload(writer, TRAIN, name="pairs", filename="train.jsonl")
    accepted = submit(writer, {"model": f"job:{parent}", "train": "pairs"})
    assert accepted.status_code == 202, accepted.text
    model = accepted.json()["spec"]["inputs"]["model"]
    assert model["job"] == parent
    assert [f["path"] for f in model["files"]] == sorted(MODEL_FOLDER)
    assert len(model["sha256"]) == 64
    # While a job reads its model, the parent stays.
    assert writer.delete(f"/v1/jobs/{parent}").status_code == 409
    # A node fetches it into one folder, each file checked against its sha256.
    ensure_inputs(get_settings(), {"model": model})
    fetched = local_path(get_settings(), model)
    assert {p.name: p.read_bytes() for p in fetched.iterdir()} == MODEL_FOLDER
    outside = {**model, "sha256": "0" * 64, "files": [{**model["files"][0], "path": "../x"}]}
    with pytest.raises(RuntimeError, match=r"input 'model': the model of job .* lists a file"):
        ensure_inputs(get_settings(), {"model": outside})

    t5 = {**MODEL_FOLDER, "config.json": b'{"model_type": "t5"}'}
    field, message = refusal(
        submit(
            writer, {"model": f"job:{succeeded_with_model(writer, tmp_path, t5)}", "train": "pairs"}
        )
    )
    assert (field, message.split(" (")[0]) == (
        "inputs.model",
        "config.json: model_type 't5' is not one transformers' AutoModelForCausalLM loads, as "
        "this recipe needs",
    )
    no_model = succeeded_with_model(writer, tmp_path, {})
    assert refusal(submit(writer, {"model": f"job:{no_model}", "train": "pairs"})) == (
        "inputs.model",
        f"job {no_model} exported no Hugging Face model (hf/merged/): the fine-tuning recipes "
        "export one",
    )
    queued = writer.post("/v1/jobs", json=job_spec()).json()["id"]
    assert refusal(submit(writer, {"model": f"job:{queued}", "train": "pairs"})) == (
        "inputs.model",
        f"job {queued} is QUEUED: its model is there once it SUCCEEDED",
    )
    with keyed(app, make_key("beta", "write")) as other:
        theirs = succeeded_with_model(other, tmp_path, MODEL_FOLDER, project="beta")
    assert refusal(submit(writer, {"model": f"job:{theirs}", "train": "pairs"})) == (
        "inputs.model",
        f"job {theirs} not found in project alpha",
    )
