"""One artifact store for checkpoints, models and (later) bundles, datasets and profiles.

Every backend answers the same small protocol, so the API, the node agent and the tests run the
same code paths on the embedded default (files under the data dir) and on a cluster (any
S3-compatible server). Objects are content-addressed (`sha256/<hex>`): the same bytes are one
object however often they are put, a key names its content for good (an ETag that never goes
stale), and the digest is checked again on every download. The package never imports torch: the
API process serves downloads from it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

from ampfleet.core.artifacts.keys import (
    CHUNK_SIZE,
    ArtifactNotFoundError,
    ChecksumMismatchError,
    digest_of_key,
    object_key,
)
from ampfleet.core.settings import Settings, get_settings

__all__ = [
    "CHUNK_SIZE",
    "ArtifactNotFoundError",
    "ArtifactStore",
    "ChecksumMismatchError",
    "StoredObject",
    "digest_of_key",
    "get_store",
    "object_key",
    "open_store",
]


@dataclass(frozen=True)
class StoredObject:
    key: str  # content-addressed: "sha256/<hex>"
    size: int
    sha256: str


class ArtifactStore(Protocol):
    def put_file(self, path: Path) -> StoredObject:
        """Stores the file's bytes; streamed, atomic, idempotent (same bytes, same key)."""
        ...

    def put_stream(self, stream: BinaryIO) -> StoredObject:
        """Like `put_file` for bytes that arrive once (a request body); a stream that raises
        leaves nothing stored."""
        ...

    def open_range(self, key: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        """The object's bytes [start, end) in chunks; `ArtifactNotFoundError` when absent."""
        ...

    def size(self, key: str) -> int | None:
        """None when absent."""
        ...

    def download_to(self, key: str, path: Path) -> None:
        """Atomic (temp name + rename next to `path`), verifies the sha256."""
        ...

    def delete(self, key: str) -> None:
        """Absent keys are fine: deleting is idempotent."""
        ...

    def keys(self) -> Iterator[str]:
        """Every complete object, for audits and tests; never a half-written one."""
        ...


def open_store(settings: Settings) -> ArtifactStore:
    """The store the settings name, built fresh (the API and the agent use `get_store`)."""
    from ampfleet.core.artifacts.local import LocalStore

    url = settings.artifact_url
    if url.startswith("s3://"):
        from ampfleet.core.artifacts.s3 import S3Store

        return S3Store.from_settings(settings)
    if url.startswith("file://"):
        return LocalStore(Path(url.removeprefix("file://")))
    return LocalStore(settings.data_dir.resolve() / "artifacts")


_stores: dict[tuple[object, ...], ArtifactStore] = {}
_stores_lock = threading.Lock()


def get_store() -> ArtifactStore:
    """The process's store, from settings, cached (a boto3 client is costly to build and is
    safe to share between threads); settings that change (tests) get their own store."""
    settings = get_settings()
    identity = (
        settings.artifact_url,
        settings.data_dir.resolve(),
        settings.s3_endpoint_url,
        settings.s3_access_key_id,
        settings.s3_secret_access_key.get_secret_value(),
        settings.s3_region,
    )
    with _stores_lock:
        store = _stores.get(identity)
        if store is None:
            store = _stores[identity] = open_store(settings)
        return store
