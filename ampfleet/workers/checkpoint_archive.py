"""A checkpoint as one object: an uncompressed tar of its files (model + optimizer state,
each rank's RNG), so it has one size, one sha256 and one download that Range can resume.

Packing streams each file into a temp tar next to the checkpoint (never a whole checkpoint in
memory). Unpacking takes only plain files with plain names (a tar is never trusted to choose
where it writes) and puts each in place with a rename, the model file last: the training loop
treats the model file as "this step exists", so it never sees a step whose RNG files are
still missing.
"""

from __future__ import annotations

import os
import re
import shutil
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path

_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# How the loop names a step's model file (workers/training/checkpoint.py): it goes last.
_MODEL_FILE = re.compile(r"ckpt-\d+\.pt")


def pack(paths: Sequence[Path], folder: Path) -> Path:
    """A temp tar in `folder` holding `paths` under their file names; the caller deletes it.
    FileNotFoundError when a file is gone (pruned since the record was written)."""
    fd, name = tempfile.mkstemp(dir=folder, prefix=".upload-", suffix=".tar")
    archive = Path(name)
    try:
        with os.fdopen(fd, "wb") as out, tarfile.open(fileobj=out, mode="w") as tar:
            for path in _model_last(paths):
                tar.add(path, arcname=path.name, recursive=False)
    except BaseException:
        archive.unlink(missing_ok=True)
        raise
    return archive


def unpack(archive: Path, folder: Path) -> list[str]:
    """Puts the archive's files into `folder`; returns their names."""
    folder.mkdir(parents=True, exist_ok=True)
    names: list[str] = []
    with tarfile.open(archive, mode="r:") as tar:
        members = [m for m in tar.getmembers() if m.isfile() and _PLAIN_NAME.fullmatch(m.name)]
        for member in _model_last_members(members):
            source = tar.extractfile(member)
            if source is None:  # only for non-files, which were left out above
                continue
            fd, temp_name = tempfile.mkstemp(dir=folder, prefix=f".{member.name}.")
            temp = Path(temp_name)
            try:
                with os.fdopen(fd, "wb") as out, source:
                    shutil.copyfileobj(source, out, 1 << 20)
                    out.flush()
                    os.fsync(out.fileno())
                os.replace(temp, folder / member.name)
            finally:
                temp.unlink(missing_ok=True)
            names.append(member.name)
    return names


def _model_last(paths: Sequence[Path]) -> list[Path]:
    return sorted(paths, key=lambda p: (_MODEL_FILE.fullmatch(p.name) is not None, p.name))


def _model_last_members(members: list[tarfile.TarInfo]) -> list[tarfile.TarInfo]:
    return sorted(members, key=lambda m: (_MODEL_FILE.fullmatch(m.name) is not None, m.name))
