"""The SDK's downloads against a real uvicorn: whole, resumed after a cut connection,
continued from a part file, and refused (no file left) when the bytes do not verify."""

from __future__ import annotations

import asyncio
import hashlib
import re
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI

from ampfleet import AsyncClient, Client
from ampfleet.core.artifacts import get_store
from ampfleet.sdk import DownloadCorrupted, NotFound
from tests.conftest import KeyFactory
from tests.sdk.cutting_proxy import CuttingProxy
from tests.support.factories import add_artifact, job_spec
from tests.support.sdk_api import BLOB, MANIFEST, SHA, serving
from tests.support.sdk_api import downloads_api as api

__all__ = ["api"]  # the fixture: a live API with a job's model, manifest and checkpoint


def test_the_model_downloads_verified_with_progress(api: dict[str, Any], tmp_path: Path) -> None:
    seen: list[tuple[str, int, int]] = []
    with Client(api["url"], api["key"]) as client:
        assert [a.name for a in client.artifacts(api["job_id"])] == [
            "model.safetensors",
            "manifest.json",
            "checkpoint-000000020",
        ]
        paths = client.download(
            api["job_id"], "model", to=tmp_path / "out", progress=lambda *a: seen.append(a)
        )
        assert client.checkpoints(api["job_id"])[0].step == 20
        with pytest.raises(NotFound):
            client.download(api["job_id"], "nope.bin", to=tmp_path / "out")
    assert paths == [tmp_path / "out" / "model.safetensors", tmp_path / "out" / "manifest.json"]
    assert paths[0].read_bytes() == BLOB
    assert paths[1].read_bytes() == MANIFEST
    assert seen[-1] == ("manifest.json", len(MANIFEST), len(MANIFEST))
    assert ("model.safetensors", len(BLOB), len(BLOB)) in seen
    assert not list((tmp_path / "out").glob("*.part"))


def test_a_name_ending_in_a_slash_downloads_the_folder_under_it(
    app: FastAPI, make_key: KeyFactory, tmp_path: Path
) -> None:
    with serving(app) as base_url, Client(base_url, make_key("alpha", "write")) as client:
        job = client.submit(job_spec()).model_dump(mode="json")
        add_artifact(tmp_path, job, "model.safetensors", "model", BLOB[:100], 20)
        add_artifact(tmp_path, job, "hf/merged/config.json", "model", MANIFEST, 20)
        add_artifact(tmp_path, job, "hf/merged/model.safetensors", "model", BLOB[:200], 20)
        add_artifact(tmp_path, job, "hf/adapter/adapter_config.json", "model", MANIFEST, 20)
        paths = client.download(job["id"], "hf/merged/", to=tmp_path / "out")
        with pytest.raises(NotFound, match="no artifact under hf/nothing/"):
            client.download(job["id"], "hf/nothing/", to=tmp_path / "out")
    folder = tmp_path / "out" / "hf" / "merged"
    assert sorted(paths) == [folder / "config.json", folder / "model.safetensors"]
    assert (folder / "model.safetensors").read_bytes() == BLOB[:200]
    assert not (tmp_path / "out" / "hf" / "adapter").exists()


def test_a_cut_connection_resumes_with_range_to_the_same_sha256(
    api: dict[str, Any], tmp_path: Path
) -> None:
    port = int(api["url"].rsplit(":", 1)[1])
    proxy = CuttingProxy(port, cut_after_bytes=2 * 1024 * 1024)
    try:
        with Client(proxy.url, api["key"]) as client:
            [path, _] = client.download(api["job_id"], "model", to=tmp_path)
    finally:
        proxy.close()
    assert proxy.connections >= 2  # the first one was cut mid-body
    assert hashlib.sha256(path.read_bytes()).hexdigest() == SHA
    first, resumed = (bytes(r).lower() for r in proxy.requests[:2])
    assert b"\r\nrange:" not in first
    offset = re.search(rb"\r\nrange: bytes=(\d+)-", resumed)
    assert offset, resumed
    assert int(offset[1]) > 0  # went on from what it had, not from the start
    assert b"\r\nif-range:" in resumed


def test_a_part_file_continues_and_a_stale_one_is_replaced(
    api: dict[str, Any], tmp_path: Path
) -> None:
    part = tmp_path / "model.safetensors.part"
    part.write_bytes(BLOB[:1_000_000])
    resumed: list[int] = []
    with Client(api["url"], api["key"]) as client:
        client.download(
            api["job_id"],
            "model.safetensors",
            to=tmp_path,
            progress=lambda _n, done, _t: resumed.append(done),
        )
        assert resumed[0] > 1_000_000  # it went on from the part, not from the start
        assert (tmp_path / "model.safetensors").read_bytes() == BLOB
        part.write_bytes(b"not these bytes" * 1000)  # a part of something else
        (tmp_path / "model.safetensors").unlink()
        client.download(api["job_id"], "model.safetensors", to=tmp_path)
    assert (tmp_path / "model.safetensors").read_bytes() == BLOB
    assert not part.exists()


def test_bytes_that_do_not_verify_leave_no_file(api: dict[str, Any], tmp_path: Path) -> None:
    # Damage the stored object in place (same length, other bytes): the API serves them.
    store_file = Path(get_store().root) / "sha256" / SHA  # type: ignore[attr-defined]
    store_file.write_bytes(bytes(len(BLOB)))
    with Client(api["url"], api["key"]) as client, pytest.raises(DownloadCorrupted):
        client.download(api["job_id"], "model.safetensors", to=tmp_path)
    assert list(tmp_path.glob("model.safetensors*")) == []


def test_async_client_downloads_a_checkpoint(api: dict[str, Any], tmp_path: Path) -> None:
    async def fetch() -> Path:
        async with AsyncClient(api["url"], api["key"]) as client:
            assert [c.step for c in await client.checkpoints(api["job_id"])] == [20]
            return await client.download_checkpoint(api["job_id"], 20, to=tmp_path)

    path = asyncio.run(fetch())
    assert path == tmp_path / "checkpoint-000000020.tar"
    assert path.read_bytes() == BLOB[:70000]
