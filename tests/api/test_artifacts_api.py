"""Artifact and checkpoint routes: listings, downloads with ETag, Range, If-Range and
If-None-Match, project isolation, read keys, and names that try to leave the table."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from ampfleet.core.artifacts import get_store
from tests.conftest import KeyFactory
from tests.support.clients import keyed
from tests.support.env import environment
from tests.support.factories import add_artifact, job_spec

BLOB = os.urandom(3 * 1024 * 1024 + 17)  # several store chunks, and not a round number
SHA = hashlib.sha256(BLOB).hexdigest()


@pytest.fixture
def produced(app: FastAPI, make_key: KeyFactory, tmp_path: Path) -> tuple[TestClient, str]:
    """A job of project alpha with a model, an output and a checkpoint; a read key of alpha."""
    writer = keyed(app, make_key("alpha", "write"))
    job = writer.post("/v1/jobs", json=job_spec()).json()
    add_artifact(tmp_path, job, "model.safetensors", "model", BLOB, 20)
    add_artifact(tmp_path, job, "outputs/plots/loss.png", "output", b"png", 20)
    add_artifact(tmp_path, job, "checkpoint-000000020", "checkpoint", BLOB[:1000], 20)
    return keyed(app, make_key("alpha", "read")), job["id"]


def test_listings_name_every_artifact_and_checkpoint(produced: tuple[TestClient, str]) -> None:
    reader, job_id = produced
    items = reader.get(f"/v1/jobs/{job_id}/artifacts").json()["items"]
    assert [(a["kind"], a["name"]) for a in items] == [
        ("model", "model.safetensors"),
        ("output", "outputs/plots/loss.png"),
        ("checkpoint", "checkpoint-000000020"),
    ]
    model = items[0]
    assert (model["size"], model["sha256"], model["step"]) == (len(BLOB), SHA, 20)
    assert model["download_url"] == f"/v1/jobs/{job_id}/artifacts/model.safetensors"
    checkpoints = reader.get(f"/v1/jobs/{job_id}/checkpoints").json()["items"]
    assert [(c["step"], c["size"], c["lineage"]) for c in checkpoints] == [
        (20, 1000, {"precision": "bf16"})
    ]
    assert checkpoints[0]["download_url"] == f"/v1/jobs/{job_id}/checkpoints/20/download"


def test_read_keys_download_whole_objects_with_their_etag(
    produced: tuple[TestClient, str],
) -> None:
    reader, job_id = produced
    response = reader.get(f"/v1/jobs/{job_id}/artifacts/model.safetensors")
    assert response.status_code == 200
    assert response.content == BLOB
    assert response.headers["content-length"] == str(len(BLOB))
    assert response.headers["etag"] == f'"{SHA}"'
    assert response.headers["accept-ranges"] == "bytes"
    assert 'filename="model.safetensors"' in response.headers["content-disposition"]
    nested = reader.get(f"/v1/jobs/{job_id}/artifacts/outputs/plots/loss.png")
    assert nested.content == b"png"
    checkpoint = reader.get(f"/v1/jobs/{job_id}/checkpoints/20/download")
    assert checkpoint.content == BLOB[:1000]
    assert 'filename="checkpoint-000000020.tar"' in checkpoint.headers["content-disposition"]


def test_ranges_and_conditions(produced: tuple[TestClient, str]) -> None:
    reader, job_id = produced
    url = f"/v1/jobs/{job_id}/artifacts/model.safetensors"
    etag = f'"{SHA}"'
    size = len(BLOB)

    part = reader.get(url, headers={"Range": "bytes=1000-"})
    assert part.status_code == 206
    assert part.content == BLOB[1000:]
    assert part.headers["content-range"] == f"bytes 1000-{size - 1}/{size}"
    assert part.headers["content-length"] == str(size - 1000)
    middle = reader.get(url, headers={"Range": "bytes=5-9", "If-Range": etag})
    assert (middle.status_code, middle.content) == (206, BLOB[5:10])
    suffix = reader.get(url, headers={"Range": "bytes=-4"})
    assert (suffix.status_code, suffix.content) == (206, BLOB[-4:])
    # The client's partial copy is of other bytes: it gets all of them again.
    stale = reader.get(url, headers={"Range": "bytes=5-9", "If-Range": '"0000"'})
    assert (stale.status_code, stale.content) == (200, BLOB)
    several = reader.get(url, headers={"Range": "bytes=0-1,5-6"})
    assert (several.status_code, len(several.content)) == (200, size)

    beyond = reader.get(url, headers={"Range": f"bytes={size}-"})
    assert beyond.status_code == 416
    assert beyond.json()["error"]["code"] == "range_not_satisfiable"
    assert beyond.headers["content-range"] == f"bytes */{size}"

    current = reader.get(url, headers={"If-None-Match": etag})
    assert (current.status_code, current.content) == (304, b"")
    assert current.headers["etag"] == etag
    assert reader.get(url, headers={"If-None-Match": '"other"'}).status_code == 200


def test_names_never_leave_the_table(produced: tuple[TestClient, str]) -> None:
    reader, job_id = produced
    base = f"/v1/jobs/{job_id}/artifacts/"
    for name in ("..%2F..%2Fampfleet.db", "outputs/..%2F..%2Fjob.json", ".incoming", "a%5Cb"):
        response = reader.get(base + name)
        assert response.status_code == 422, (name, response.text)
        assert response.json()["error"]["code"] == "validation_error"
    # A well-formed name that is not a row of the job, a store key included, is not found.
    for name in ("nope.bin", f"sha256/{SHA}", "model"):
        response = reader.get(base + name)
        assert response.status_code == 404, name
    assert reader.get(f"/v1/jobs/{job_id}/checkpoints/21/download").status_code == 404
    assert reader.get(f"/v1/jobs/{job_id}/checkpoints/-1/download").status_code == 422


def test_another_project_sees_no_artifact(
    produced: tuple[TestClient, str], app: FastAPI, make_key: KeyFactory
) -> None:
    _, job_id = produced
    other = keyed(app, make_key("beta", "write"))
    for path in (
        "/artifacts",
        "/artifacts/model.safetensors",
        "/checkpoints",
        "/checkpoints/20/download",
    ):
        response = other.get(f"/v1/jobs/{job_id}{path}")
        assert response.status_code == 404, path
        assert response.json()["error"]["code"] == "not_found"


def test_a_missing_object_is_an_error_envelope_not_a_500(
    produced: tuple[TestClient, str],
) -> None:
    reader, job_id = produced
    get_store().delete(f"sha256/{SHA}")
    response = reader.get(f"/v1/jobs/{job_id}/artifacts/model.safetensors")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "service_unavailable"


def test_downloads_stream_from_an_s3_store(
    app: FastAPI, make_key: KeyFactory, tmp_path: Path, seaweedfs: Any
) -> None:
    from tests.conftest import S3_TEST_BUCKET

    with environment(seaweedfs.environment(S3_TEST_BUCKET, prefix=f"api-{os.getpid()}")):
        writer = keyed(app, make_key("alpha", "write"))
        job = writer.post("/v1/jobs", json=job_spec()).json()
        add_artifact(tmp_path, job, "model.safetensors", "model", BLOB, 20)
        url = f"/v1/jobs/{job['id']}/artifacts/model.safetensors"
        assert writer.get(url).content == BLOB
        part = writer.get(url, headers={"Range": "bytes=2000000-"})
        assert (part.status_code, part.content) == (206, BLOB[2000000:])
