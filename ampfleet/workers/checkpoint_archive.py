"""A checkpoint as one object: an uncompressed tar of its folder (DCP's shards and
metadata, each rank's RNG, meta.json), so it has one size, one sha256 and one download that
Range can resume.

Packing streams each file into a temp tar next to the checkpoint (never a whole checkpoint in
memory), each under `ckpt-<step>/<name>`. Unpacking takes only plain files with plain names
in one checkpoint folder (a tar is never trusted to choose where it writes), fills a hidden
folder beside it and renames that into place: the training loop only ever sees a complete
checkpoint folder, as when it wrote one itself.
"""

from __future__ import annotations

import os
import re
import shutil
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path, PurePath
from typing import BinaryIO

from ampfleet.workers import beneath

# A checkpoint folder as the loop names it (workers/training/checkpoint.py), and a file in
# it: a plain name (DCP names its shards `__<rank>_<n>.distcp`), or DCP's `.metadata`.
_FILE = r"\.metadata|[A-Za-z0-9_][A-Za-z0-9._-]*"
_MEMBER = re.compile(rf"(ckpt-\d{{9}})/({_FILE})")


def is_file_name(name: str) -> bool:
    """Whether a checkpoint's archive can hold a file of this name."""
    return re.fullmatch(_FILE, name) is not None


class TooLargeError(ValueError):
    """More bytes than an artifact may have."""


class BoundedReader:
    """A file read to at most `limit` bytes: TooLargeError past it (a file that grows while
    it is read)."""

    def __init__(self, source: BinaryIO, limit: int) -> None:
        self._source, self._left = source, limit

    def read(self, size: int = -1) -> bytes:
        if size < 0:  # to the end, in chunks: never one buffer of the whole limit
            return b"".join(iter(lambda: self.read(1 << 20), b""))
        data = self._source.read(min(size, self._left + 1))
        self._left -= len(data)
        if self._left < 0:
            raise TooLargeError("the file grew past the largest artifact while it was read")
        return data


def archive_name(path: PurePath) -> str:
    """How a checkpoint file is named in its archive (and listed): `ckpt-<step>/<name>`."""
    return f"{path.parent.name}/{path.name}"


def pack(files: Sequence[tuple[Path, PurePath]], folder: Path, limit: int) -> Path:
    """A temp tar in `folder` (the agent's own) holding each file, opened beneath its root
    (beneath.py: regular files only, no link followed), under its archive name; the caller
    deletes it. FileNotFoundError when a file is gone (pruned since the record was written);
    TooLargeError past `limit` bytes in all."""
    fd, name = tempfile.mkstemp(dir=folder, prefix=".upload-", suffix=".tar")
    archive = Path(name)
    left = limit
    try:
        with os.fdopen(fd, "wb") as out, tarfile.open(fileobj=out, mode="w") as tar:
            for root, relative in sorted(files, key=lambda f: str(f[1])):
                with os.fdopen(beneath.open_regular(root, relative), "rb") as source:
                    size = os.fstat(source.fileno()).st_size
                    left -= size
                    if left < 0:
                        raise TooLargeError(f"a checkpoint over {limit} bytes")
                    info = tarfile.TarInfo(archive_name(relative))
                    info.size, info.mode = size, 0o644
                    tar.addfile(info, source)  # reads exactly `size` bytes
    except BaseException:
        archive.unlink(missing_ok=True)
        raise
    return archive


def unpack(archive: Path, folder: Path) -> list[str]:
    """Puts the archive's checkpoint folder into `folder`; returns its files' archive names."""
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, mode="r:") as tar:
        members = [m for m in tar.getmembers() if m.isfile() and _MEMBER.fullmatch(m.name)]
        checkpoints = {m.name.split("/")[0] for m in members}
        if len(checkpoints) != 1:
            raise ValueError(f"{archive.name}: expected one checkpoint folder, got {checkpoints}")
        (checkpoint,) = checkpoints
        staging = Path(tempfile.mkdtemp(dir=folder, prefix=f".{checkpoint}.restore-"))
        try:
            for member in members:
                source = tar.extractfile(member)
                if source is None:  # only for non-files, which were left out above
                    continue
                with (staging / member.name.split("/")[1]).open("wb") as out, source:
                    shutil.copyfileobj(source, out, 1 << 20)
                    out.flush()
                    os.fsync(out.fileno())
            final = folder / checkpoint
            if final.exists():
                shutil.rmtree(final)
            staging.replace(final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return sorted(m.name for m in members)
