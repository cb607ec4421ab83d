"""Datasets uploaded over the API in tests: bytes posted to /v1/datasets (`upload`), files
uploaded as one tar.gz dataset and named by its first version (`folder`), and inputs the
fine-tuning recipes accept at submit: a model folder's files (MODEL_FOLDER: a config, weights
and a tokenizer, none of them real) and a line of prompt/completion data (TRAIN)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.support.archives import file_entry, tar_gz_of

MODEL_FOLDER = {
    "config.json": b'{"model_type": "llama"}',
    "model.safetensors": b"weights",
    "tokenizer.json": b"{}",
}
TRAIN = b'{"prompt": "a", "completion": "b"}\n'


def upload(client: TestClient, body: bytes, **params: str):
    return client.post(
        "/v1/datasets",
        content=body,
        params=params,
        headers={"Content-Type": "application/octet-stream"},
    )


def folder(client: TestClient, name: str, files: dict[str, bytes]) -> str:
    body = tar_gz_of([file_entry(path, data) for path, data in files.items()])
    answered = upload(client, body, name=name)
    assert answered.status_code == 201, answered.text
    return f"{name}@1"
