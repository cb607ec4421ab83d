"""What every backend shares: the key format, the chunk size, hashing a stream on the way.

A key is `sha256/<64 lowercase hex>` and nothing else: it is checked before any backend turns it
into a path or a bucket key, so no name a client sends can reach the filesystem or the bucket.
"""

from __future__ import annotations

import hashlib
import re
from typing import BinaryIO

# Big enough that per-chunk overhead vanishes next to disk and network, small enough that a
# few concurrent downloads stay in a few MiB of memory.
CHUNK_SIZE = 1 << 20

_KEY = re.compile(r"sha256/([0-9a-f]{64})")


class ArtifactNotFoundError(LookupError):
    """No complete object under that key."""


class ChecksumMismatchError(ValueError):
    """The bytes read back are not the bytes the key names."""


def object_key(sha256: str) -> str:
    key = f"sha256/{sha256}"
    digest_of_key(key)
    return key


def digest_of_key(key: str) -> str:
    """The sha256 a key names; ValueError for anything that is not a well-formed key."""
    match = _KEY.fullmatch(key)
    if match is None:
        raise ValueError(f"not an artifact key: {key[:80]!r}")
    return match.group(1)


class HashingReader:
    """Passes a stream's bytes through while counting and hashing them (one pass, any size)."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._hash = hashlib.sha256()
        self.size = 0

    def read(self, amount: int = -1) -> bytes:
        data = self._stream.read(amount)
        self._hash.update(data)
        self.size += len(data)
        return data

    @property
    def sha256(self) -> str:
        return self._hash.hexdigest()


def file_sha256(stream: BinaryIO) -> tuple[str, int]:
    """Digest and size of a stream read to its end, chunk by chunk."""
    reader = HashingReader(stream)
    while reader.read(CHUNK_SIZE):
        pass
    return reader.sha256, reader.size
