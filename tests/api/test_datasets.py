"""Dataset routes: versions counting up per name, the same bytes being the same version, single
files and checked archives, the size limit, project scoping and roles, deletion guarded by the
jobs that name a version, and a spec's `inputs` resolved at submit."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from ampfleet.core.artifacts import get_store, object_key
from tests.conftest import KeyFactory
from tests.support.archives import file_entry, tar_gz_of
from tests.support.clients import keyed
from tests.support.datasets import upload
from tests.support.env import environment
from tests.support.factories import job_spec

CSV = b"x,y\n1,2\n3,4\n"


@pytest.fixture
def writer(app: FastAPI, make_key: KeyFactory) -> Iterator[TestClient]:
    with keyed(app, make_key("alpha", "write")) as client:
        yield client


def test_versions_count_up_and_the_same_bytes_are_the_same_version(writer: TestClient) -> None:
    first = upload(writer, CSV, name="pairs", filename="pairs.csv")
    assert first.status_code == 201, first.text
    v1 = first.json()
    assert v1["id"].startswith("dts_")
    assert (v1["name"], v1["version"], v1["format"], v1["filename"]) == (
        "pairs",
        1,
        "file",
        "pairs.csv",
    )
    assert (v1["sha256"], v1["size"]) == (hashlib.sha256(CSV).hexdigest(), len(CSV))
    assert v1["files"] == [{"path": "pairs.csv", "size": len(CSV), "kind": "file"}]
    assert get_store().size(object_key(v1["sha256"])) == len(CSV)

    again = upload(writer, CSV, name="pairs", filename="pairs.csv")
    assert (again.status_code, again.json()["id"]) == (200, v1["id"])
    archive = tar_gz_of([file_entry("train/a.csv", CSV), file_entry("val/b.csv", CSV)])
    second = upload(writer, archive, name="pairs")
    assert second.status_code == 201, second.text
    v2 = second.json()
    assert (v2["version"], v2["format"], v2["filename"], v2["file_count"]) == (
        2,
        "tar.gz",
        None,
        2,
    )
    # Another name holding the same bytes starts its own versions.
    other = upload(writer, CSV, name="copy", filename="pairs.csv").json()
    assert other["version"] == 1
    listed = writer.get("/v1/datasets", params={"name": "pairs"}).json()["items"]
    assert [d["version"] for d in listed] == [2, 1]
    assert writer.get(f"/v1/datasets/{v2['id']}").json() == v2


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({}, "name"),
        ({"name": "has space"}, "name"),
        ({"name": "ok", "filename": "../up.csv"}, "filename"),
        ({"name": "ok", "filename": "a/b.csv"}, "filename"),
    ],
)
def test_bad_names_are_422_and_store_nothing(
    writer: TestClient, params: dict[str, str], field: str
) -> None:
    response = upload(writer, CSV, **params)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["details"][0]["field"].endswith(field)
    assert list(get_store().keys()) == []


def test_an_archive_is_checked_and_a_plain_file_needs_its_name(writer: TestClient) -> None:
    not_archive = upload(writer, CSV, name="pairs")
    assert not_archive.status_code == 422
    assert "?filename=" in not_archive.json()["error"]["message"]
    escaping = upload(writer, tar_gz_of([file_entry("../../evil", b"x")]), name="pairs")
    assert escaping.status_code == 422
    assert list(get_store().keys()) == []
    assert writer.get("/v1/datasets").json()["items"] == []


def test_size_limit_is_413_naming_it(writer: TestClient) -> None:
    with environment({"AMPFLEET_MAX_DATASET_BYTES": "8"}):
        response = upload(writer, CSV, name="pairs", filename="pairs.csv")
    assert response.status_code == 413, response.text
    assert "AMPFLEET_MAX_DATASET_BYTES = 8 bytes" in response.json()["error"]["message"]
    assert list(get_store().keys()) == []


def test_projects_and_roles(app: FastAPI, writer: TestClient, make_key: KeyFactory) -> None:
    mine = upload(writer, CSV, name="pairs", filename="p.csv").json()
    with keyed(app, make_key("beta", "write")) as other:
        assert other.get(f"/v1/datasets/{mine['id']}").status_code == 404
        assert other.delete(f"/v1/datasets/{mine['id']}").status_code == 404
        assert other.get("/v1/datasets").json()["items"] == []
        refused = upload(other, CSV, name="pairs", filename="p.csv", project="alpha")
        assert refused.status_code == 403
        # Another project's dataset is not an input of this project's jobs.
        spec = job_spec(project="beta", inputs={"train": "pairs@1"})
        response = other.post("/v1/jobs", json=spec)
        assert response.status_code == 422, response.text
        assert response.json()["error"]["details"][0]["field"] == "inputs.train"
    with keyed(app, make_key("alpha", "read")) as reader:
        assert reader.get(f"/v1/datasets/{mine['id']}").status_code == 200
        refused = upload(reader, CSV, name="pairs", filename="q.csv")
        assert refused.status_code == 403
        assert "read-only" in refused.json()["error"]["message"]


def test_inputs_resolve_at_submit_and_guard_deletion(writer: TestClient) -> None:
    v1 = upload(writer, CSV, name="pairs", filename="p.csv").json()
    v2 = upload(writer, CSV + b"5,6\n", name="pairs", filename="p.csv").json()
    response = writer.post(
        "/v1/jobs",
        json=job_spec(project="alpha", inputs={"train": "pairs", "old": "pairs@1"}),
    )
    assert response.status_code == 202, response.text
    inputs = response.json()["spec"]["inputs"]
    # A bare name is its newest version when submitted: a restart reads the same bytes.
    assert inputs["train"] == {
        "dataset": v2["id"],
        "name": "pairs",
        "version": 2,
        "sha256": v2["sha256"],
        "filename": "p.csv",
    }
    assert inputs["old"]["dataset"] == v1["id"]
    for missing, field in (("pairs@3", "inputs.a"), ("nothing", "inputs.a")):
        refused = writer.post("/v1/jobs", json=job_spec(project="alpha", inputs={"a": missing}))
        assert refused.status_code == 422
        assert refused.json()["error"]["details"][0]["field"] == field
    in_use = writer.delete(f"/v1/datasets/{v1['id']}")
    assert in_use.status_code == 409
    assert response.json()["id"] in in_use.json()["error"]["message"]
    assert writer.post(f"/v1/jobs/{response.json()['id']}/cancel").status_code == 202
    assert writer.delete(f"/v1/datasets/{v1['id']}").status_code == 204
    assert get_store().size(object_key(v1["sha256"])) is None


def test_shared_folders_only_under_the_operators_roots(writer: TestClient, tmp_path) -> None:
    root = tmp_path / "shared"
    (root / "corpus").mkdir(parents=True)
    with environment({"AMPFLEET_DATA_ROOTS": f'["{root}"]'}):
        inside = writer.post(
            "/v1/jobs",
            json=job_spec(project="alpha", inputs={"corpus": f"file://{root}/corpus"}),
        )
        assert inside.status_code == 202, inside.text
        assert inside.json()["spec"]["inputs"]["corpus"] == {"path": f"{root}/corpus"}
        for outside in (f"file://{tmp_path}/elsewhere", f"file://{root}/../shared2"):
            refused = writer.post(
                "/v1/jobs", json=job_spec(project="alpha", inputs={"corpus": outside})
            )
            assert refused.status_code == 422, refused.text
            assert "not under a folder the operator allows" in refused.json()["error"]["message"]
    refused = writer.post(
        "/v1/jobs", json=job_spec(project="alpha", inputs={"corpus": f"file://{root}/corpus"})
    )
    assert "AMPFLEET_DATA_ROOTS is not set" in refused.json()["error"]["message"]
