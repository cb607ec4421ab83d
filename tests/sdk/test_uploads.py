"""The SDK's uploads against a real uvicorn: a folder packed (its ignore files honoured, the
same files giving the same bundle), datasets from a file and from a folder, a submit that
brings its code and inputs, and a bundle over the limit naming its largest files."""

from __future__ import annotations

import asyncio
import os
import tarfile
from pathlib import Path

import pytest
from fastapi import FastAPI

from ampfleet import AsyncClient, Client
from ampfleet.core.artifacts import get_store, object_key
from ampfleet.sdk import ApiError
from tests.conftest import KeyFactory
from tests.support.archives import allow_custom_code
from tests.support.env import environment
from tests.support.sdk_api import serving


def recipe_folder(root: Path) -> Path:
    folder = root / "my-recipe"
    (folder / "my_pkg").mkdir(parents=True)
    (folder / "my_pkg" / "__init__.py").write_text("")
    (folder / "my_pkg" / "recipe.py").write_text("recipe = None\n")
    (folder / ".git").mkdir()
    (folder / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (folder / "scratch").mkdir()
    (folder / "scratch" / "notes.txt").write_text("not for the bundle")
    (folder / ".ampignore").write_text("scratch/\n")
    return folder


@pytest.fixture(autouse=True)
def custom_code(backend: str) -> None:
    allow_custom_code("alpha")


def test_a_folder_is_packed_and_the_same_files_are_the_same_bundle(
    app: FastAPI, make_key: KeyFactory, tmp_path: Path
) -> None:
    folder = recipe_folder(tmp_path)
    sent: list[int] = []
    with serving(app) as url, Client(url, make_key("alpha", "write")) as client:
        bundle = client.upload_bundle(folder, on_progress=sent.append)
        os.utime(folder / "my_pkg" / "recipe.py", (1, 1))  # a new mtime, the same files
        again = client.upload_bundle(folder)
        assert [b.id for b in client.bundles()] == [bundle.id]
    assert again.id == bundle.id
    assert sorted(f.path for f in bundle.files) == [
        ".ampignore",
        "my_pkg/__init__.py",
        "my_pkg/recipe.py",
    ]
    assert sent
    assert sent[-1] == bundle.size
    stored = tmp_path / "stored.tar.gz"
    get_store().download_to(object_key(bundle.sha256), stored)
    with tarfile.open(stored) as archive:
        assert all(m.mtime == 0 and m.uid == 0 for m in archive.getmembers())


def test_datasets_from_a_file_and_a_folder_and_a_submit_that_brings_them(
    app: FastAPI, make_key: KeyFactory, tmp_path: Path
) -> None:
    csv = tmp_path / "pairs.csv"
    csv.write_text("x,y\n1,2\n")
    shards = tmp_path / "shards"
    shards.mkdir()
    (shards / "a.txt").write_text("a")
    spec = {"project": "alpha", "code": {"entrypoint": "my_pkg.recipe:recipe"}}

    async def go(url: str, key: str) -> tuple:
        async with AsyncClient(url, key) as client:
            single = await client.upload_dataset("pairs", csv)
            folder = await client.upload_dataset("shards", shards)
            job = await client.submit(
                spec,
                code=recipe_folder(tmp_path),
                inputs={"train": csv, "shards": "shards@1"},
            )
            return single, folder, job, await client.datasets(name="pairs")

    with serving(app) as url:
        single, folder, job, listed = asyncio.run(go(url, make_key("alpha", "write")))
    assert (single.format, single.filename, single.ref) == ("file", "pairs.csv", "pairs@1")
    assert (folder.format, folder.filename, [f.path for f in folder.files]) == (
        "tar.gz",
        None,
        ["a.txt"],
    )
    # The same file again under the input's name is a version of its own name: `train`.
    assert job.spec["inputs"]["train"]["name"] == "train"
    assert job.spec["inputs"]["shards"]["dataset"] == folder.id
    assert job.spec["code"]["bundle"].startswith("bnd_")
    assert job.spec["code"]["entrypoint"] == "my_pkg.recipe:recipe"
    assert [d.id for d in listed] == [single.id]


def test_an_invalid_spec_uploads_nothing(
    app: FastAPI, make_key: KeyFactory, tmp_path: Path
) -> None:
    with serving(app) as url, Client(url, make_key("alpha", "write")) as client:
        with pytest.raises(ApiError) as refused:
            client.submit({"project": "alpha", "code": {"entrypoint": "no colon"}}, code=tmp_path)
        assert refused.value.status == 422
        assert client.bundles() == []


def test_a_bundle_over_the_limit_names_its_largest_files(
    app: FastAPI, make_key: KeyFactory, tmp_path: Path
) -> None:
    folder = recipe_folder(tmp_path)
    (folder / "weights.bin").write_bytes(os.urandom(300_000))
    (folder / "data.bin").write_bytes(os.urandom(200_000))
    with (
        environment({"AMPFLEET_MAX_BUNDLE_BYTES": "100000"}),
        serving(app) as url,
        Client(url, make_key("alpha", "write")) as client,
        pytest.raises(ApiError) as refused,
    ):
        client.upload_bundle(folder)
    assert refused.value.status == 413
    message = refused.value.message
    assert "AMPFLEET_MAX_BUNDLE_BYTES = 100000 bytes" in message
    assert message.index("weights.bin (0.3 MiB)") < message.index("data.bin (0.2 MiB)")
