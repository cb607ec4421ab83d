"""The artifact store's contract, on both backends (files under the data dir, SeaweedFS S3):
streamed both ways, content-addressed, atomic, ranged, deletable, verified on download."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import pytest

from ampfleet.core.artifacts import (
    CHUNK_SIZE,
    ArtifactNotFoundError,
    ArtifactStore,
    ChecksumMismatchError,
    get_store,
    object_key,
)
from ampfleet.core.artifacts.local import LocalStore
from ampfleet.core.artifacts.s3 import TRANSFER, S3Store
from tests.support.env import environment

# Larger than a read chunk and than an S3 part: several parts, several chunks.
BIG = 2 * TRANSFER.multipart_chunksize + 12345


@pytest.fixture
def store(store_environment: dict[str, str]) -> Iterator[ArtifactStore]:
    with environment(store_environment):
        yield get_store()


def _write(path: Path, size: int, seed: int = 0) -> bytes:
    block = hashlib.sha256(str(seed).encode()).digest() * (CHUNK_SIZE // 32)
    data = (block * (size // len(block) + 1))[:size]
    path.write_bytes(data)
    return data


class _CountingReader:
    """A real file read through, remembering the largest read the store asked for."""

    def __init__(self, stream: BinaryIO, fail_after: int | None = None) -> None:
        self._stream = stream
        self._fail_after = fail_after
        self.largest_read = 0
        self.delivered = 0

    def read(self, amount: int = -1) -> bytes:
        if amount < 0:
            raise AssertionError("the store asked for the whole stream at once")
        self.largest_read = max(self.largest_read, amount)
        if self._fail_after is not None and self.delivered >= self._fail_after:
            raise ConnectionResetError("the client went away mid-upload")
        data = self._stream.read(amount)
        self.delivered += len(data)
        return data


def _listed_names(store: ArtifactStore) -> list[str]:
    """Everything the backend holds, complete or not (beyond what `keys()` promises)."""
    if isinstance(store, LocalStore):
        return sorted(str(p.relative_to(store.root)) for p in store.root.rglob("*") if p.is_file())
    assert isinstance(store, S3Store)
    answer = store.client.list_objects_v2(Bucket=store.bucket, Prefix=store.prefix)
    uploads = store.client.list_multipart_uploads(Bucket=store.bucket, Prefix=store.prefix)
    return [o["Key"] for o in answer.get("Contents", [])] + [
        u["Key"] for u in uploads.get("Uploads", [])
    ]


def test_a_large_file_round_trips_streamed(store: ArtifactStore, tmp_path: Path) -> None:
    data = _write(tmp_path / "big.bin", BIG)
    with (tmp_path / "big.bin").open("rb") as source:
        reader = _CountingReader(source)
        stored = store.put_stream(reader)  # type: ignore[arg-type]
    assert reader.largest_read < BIG
    assert stored.sha256 == hashlib.sha256(data).hexdigest()
    assert stored.key == f"sha256/{stored.sha256}"
    assert stored.size == BIG == store.size(stored.key)

    chunks = list(store.open_range(stored.key))
    assert max(len(c) for c in chunks) <= CHUNK_SIZE
    assert b"".join(chunks) == data

    store.download_to(stored.key, tmp_path / "out" / "copy.bin")
    assert (tmp_path / "out" / "copy.bin").read_bytes() == data
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["copy.bin"]


def test_the_same_bytes_are_one_object(store: ArtifactStore, tmp_path: Path) -> None:
    data = _write(tmp_path / "a.bin", 3 * CHUNK_SIZE + 7, seed=1)
    (tmp_path / "b.bin").write_bytes(data)
    first = store.put_file(tmp_path / "a.bin")
    second = store.put_file(tmp_path / "b.bin")
    with (tmp_path / "a.bin").open("rb") as source:
        third = store.put_stream(source)
    assert first == second == third
    assert first.key == object_key(hashlib.sha256(data).hexdigest())
    assert list(store.keys()) == [first.key]

    _write(tmp_path / "c.bin", 100, seed=2)
    other = store.put_file(tmp_path / "c.bin")
    assert other.key != first.key
    assert sorted(store.keys()) == sorted([first.key, other.key])


def test_an_interrupted_upload_leaves_nothing(store: ArtifactStore, tmp_path: Path) -> None:
    _write(tmp_path / "big.bin", BIG, seed=3)
    with (tmp_path / "big.bin").open("rb") as source:
        reader = _CountingReader(source, fail_after=TRANSFER.multipart_chunksize + 1)
        with pytest.raises(ConnectionResetError):
            store.put_stream(reader)  # type: ignore[arg-type]
    assert reader.delivered > TRANSFER.multipart_chunksize  # the server had seen parts
    assert list(store.keys()) == []
    assert _listed_names(store) == []


@pytest.mark.parametrize(
    ("start", "end"),
    [
        (0, None),
        (0, 1),
        (5, 10),
        (CHUNK_SIZE - 3, CHUNK_SIZE + 3),
        (CHUNK_SIZE, 2 * CHUNK_SIZE + 1),
        (3 * CHUNK_SIZE + 1, None),
        (10, 10),
        (0, 10 * CHUNK_SIZE),
    ],
)
def test_ranges(store: ArtifactStore, tmp_path: Path, start: int, end: int | None) -> None:
    data = _write(tmp_path / "r.bin", 3 * CHUNK_SIZE + 100, seed=4)
    stored = store.put_file(tmp_path / "r.bin")
    assert b"".join(store.open_range(stored.key, start, end)) == data[start:end]


def test_delete(store: ArtifactStore, tmp_path: Path) -> None:
    _write(tmp_path / "d.bin", 1000, seed=5)
    stored = store.put_file(tmp_path / "d.bin")
    store.delete(stored.key)
    store.delete(stored.key)  # again: nothing to do, no error
    assert store.size(stored.key) is None
    assert list(store.keys()) == []
    with pytest.raises(ArtifactNotFoundError):
        store.open_range(stored.key)
    with pytest.raises(ArtifactNotFoundError):
        store.download_to(stored.key, tmp_path / "gone.bin")
    assert not (tmp_path / "gone.bin").exists()


def test_a_download_that_does_not_match_its_key_lands_nowhere(
    store: ArtifactStore, tmp_path: Path
) -> None:
    data = _write(tmp_path / "v.bin", 2 * CHUNK_SIZE, seed=6)
    stored = store.put_file(tmp_path / "v.bin")
    corrupted = data[:-1] + bytes([data[-1] ^ 1])
    if isinstance(store, LocalStore):
        (store.root / stored.key).write_bytes(corrupted)
    else:
        assert isinstance(store, S3Store)
        store.client.put_object(Bucket=store.bucket, Key=store.prefix + stored.key, Body=corrupted)
    (tmp_path / "out").mkdir()
    with pytest.raises(ChecksumMismatchError):
        store.download_to(stored.key, tmp_path / "out" / "v.bin")
    assert list((tmp_path / "out").iterdir()) == []


@pytest.mark.parametrize(
    "key", ["sha256/../../etc/passwd", "../x", "sha256/" + "A" * 64, "sha256/abc", ""]
)
def test_only_well_formed_keys_reach_a_backend(store: ArtifactStore, key: str) -> None:
    with pytest.raises(ValueError, match="not an artifact key"):
        store.size(key)
    with pytest.raises(ValueError, match="not an artifact key"):
        store.delete(key)


def test_the_default_store_lives_under_the_data_dir(tmp_path: Path) -> None:
    with environment({"AMPFLEET_DATA_DIR": str(tmp_path / "var"), "AMPFLEET_ARTIFACT_URL": ""}):
        store = get_store()
        assert isinstance(store, LocalStore)
        assert store.root == (tmp_path / "var" / "artifacts").resolve()
        assert get_store() is store
