"""The embedded default: objects as files under `<data dir>/artifacts/sha256/<hex>`.

A put streams into `.incoming/` (same filesystem), fsyncs, then renames onto the key: a reader
sees the whole object or none; a put that fails removes its incoming file, and one that is
killed leaves only an incoming file that no listing reports.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from ampfleet.core.artifacts.keys import (
    CHUNK_SIZE,
    ArtifactNotFoundError,
    HashingReader,
    digest_of_key,
    object_key,
)
from ampfleet.core.artifacts.transfer import write_verified

if TYPE_CHECKING:
    from ampfleet.core.artifacts import StoredObject


class LocalStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._objects = root / "sha256"
        self._incoming = root / ".incoming"
        self._objects.mkdir(parents=True, exist_ok=True)
        self._incoming.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self._objects / digest_of_key(key)

    def put_file(self, path: Path) -> StoredObject:
        with path.open("rb") as source:
            return self.put_stream(source)

    def put_stream(self, stream: BinaryIO) -> StoredObject:
        from ampfleet.core.artifacts import StoredObject

        reader = HashingReader(stream)
        fd, temp_name = tempfile.mkstemp(dir=self._incoming)
        temp = Path(temp_name)
        try:
            with os.fdopen(fd, "wb") as out:
                while chunk := reader.read(CHUNK_SIZE):
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            key = object_key(reader.sha256)
            os.replace(temp, self._path(key))
        finally:
            temp.unlink(missing_ok=True)
        _fsync_dir(self._objects)
        return StoredObject(key=key, size=reader.size, sha256=reader.sha256)

    def open_range(self, key: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        try:
            source = self._path(key).open("rb")
        except FileNotFoundError:
            raise ArtifactNotFoundError(key) from None
        return _read_range(source, start, end)

    def size(self, key: str) -> int | None:
        try:
            return self._path(key).stat().st_size
        except FileNotFoundError:
            return None

    def download_to(self, key: str, path: Path) -> None:
        write_verified(self.open_range(key), path, digest_of_key(key))

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def keys(self) -> Iterator[str]:
        for entry in sorted(self._objects.iterdir()):
            yield object_key(entry.name)


def _read_range(source: BinaryIO, start: int, end: int | None) -> Iterator[bytes]:
    with source:
        source.seek(start)
        remaining = None if end is None else max(0, end - start)
        while remaining is None or remaining > 0:
            chunk = source.read(CHUNK_SIZE if remaining is None else min(CHUNK_SIZE, remaining))
            if not chunk:
                return
            if remaining is not None:
                remaining -= len(chunk)
            yield chunk


def _fsync_dir(folder: Path) -> None:
    # A rename is durable only once its directory is (the checkpoint writer does the same).
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
