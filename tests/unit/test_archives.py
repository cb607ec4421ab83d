"""Unpacking a checked archive (the worker's side of a bundle): files, folders and in-tree
links land under the target folder and nowhere else; a stated size that lies is caught while
the bytes are written; hostile archives leave nothing outside the target."""

from __future__ import annotations

import tarfile
import zipfile
from pathlib import Path

import pytest

from ampfleet.core.archives import ArchiveLimits, ArchiveRefusedError, unpack_archive
from tests.support.archives import file_entry, special_entry, tar_gz_of, zip_of

LIMITS = ArchiveLimits(max_files=100, max_unpacked_bytes=1 << 20)


def written(tmp_path: Path, body: bytes, name: str = "a") -> Path:
    archive = tmp_path / f"{name}.archive"
    archive.write_bytes(body)
    return archive


def test_tar_gz_unpacks_files_folders_and_links(tmp_path: Path) -> None:
    body = tar_gz_of(
        [
            special_entry(".", tarfile.DIRTYPE),
            special_entry("./pkg", tarfile.DIRTYPE),
            file_entry("./pkg/recipe.py", b"RECIPE = 1\n"),
            special_entry("./pkg/alias.py", tarfile.SYMTYPE, "recipe.py"),
            special_entry("./copy.py", tarfile.LNKTYPE, "./pkg/recipe.py"),
        ]
    )
    dest = tmp_path / "out"
    unpack_archive(written(tmp_path, body), dest, LIMITS)
    assert (dest / "pkg/recipe.py").read_bytes() == b"RECIPE = 1\n"
    assert (dest / "pkg/alias.py").is_symlink()
    assert (dest / "pkg/alias.py").read_bytes() == b"RECIPE = 1\n"
    assert not (dest / "copy.py").is_symlink()
    assert (dest / "copy.py").read_bytes() == b"RECIPE = 1\n"


def test_zip_unpacks(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    body = zip_of({"my_pkg/__init__.py": b"", "my_pkg/recipe.py": b"x = 1\n"}, {"l": "my_pkg"})
    unpack_archive(written(tmp_path, body), dest, LIMITS)
    assert (dest / "my_pkg/recipe.py").read_bytes() == b"x = 1\n"
    assert (dest / "l").resolve() == (dest / "my_pkg").resolve()


def test_a_zip_whose_stated_size_lies_is_stopped_while_writing(tmp_path: Path) -> None:
    body = bytearray(zip_of({"big.bin": bytes(2 << 20)}))
    # Make the central directory (what the checks read) claim 10 bytes: a lying archive.
    with zipfile.ZipFile(written(tmp_path, bytes(body))) as archive:
        info = archive.getinfo("big.bin")
    offset = body.rindex(b"PK\x01\x02")
    body[offset + 24 : offset + 28] = (10).to_bytes(4, "little")
    dest = tmp_path / "out"
    assert info.file_size == 2 << 20
    with pytest.raises(ArchiveRefusedError):
        unpack_archive(written(tmp_path, bytes(body), "lying"), dest, LIMITS)
    assert not (dest / "big.bin").exists() or (dest / "big.bin").stat().st_size <= 1 << 20


@pytest.mark.parametrize(
    "body",
    [
        tar_gz_of([file_entry("../escape.py", b"x")]),
        tar_gz_of([special_entry("up", tarfile.SYMTYPE, "../..")]),
        zip_of({"/abs.py": b"x"}),
    ],
)
def test_hostile_archives_write_nothing(tmp_path: Path, body: bytes) -> None:
    dest = tmp_path / "box" / "out"
    with pytest.raises(ArchiveRefusedError):
        unpack_archive(written(tmp_path, body), dest, LIMITS)
    assert not dest.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.archive"]
