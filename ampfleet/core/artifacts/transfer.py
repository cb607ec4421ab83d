"""Writing an object's chunks to a local file the way every backend must: a temp name next to
the target, the digest checked before the rename, so a cut or corrupted download never lands
under the target's name."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from ampfleet.core.artifacts.keys import ChecksumMismatchError


def write_verified(chunks: Iterable[bytes], path: Path, sha256: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    fd, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    temp = Path(temp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in chunks:
                digest.update(chunk)
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        if digest.hexdigest() != sha256:
            raise ChecksumMismatchError(f"expected sha256 {sha256}, read {digest.hexdigest()}")
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)
