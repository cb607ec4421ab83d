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
    ids=["tar-escape", "tar-link-up", "zip-absolute"],  # names the same in every process
)
def test_hostile_archives_write_nothing(tmp_path: Path, body: bytes) -> None:
    dest = tmp_path / "box" / "out"
    with pytest.raises(ArchiveRefusedError):
        unpack_archive(written(tmp_path, body), dest, LIMITS)
    assert not dest.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.archive"]


def links(*pairs: tuple[str, str]) -> list[tuple[tarfile.TarInfo, bytes]]:
    return [special_entry(name, tarfile.SYMTYPE, target) for name, target in pairs]


CHAINS_OUT = {
    # Each link reads as inside the tree; followed as the kernel follows them, one leaves it.
    "the issue's chain": links(("p/d", "."), ("p/e", "d/../..")),
    "listed in the other order": links(("p/e", "d/../.."), ("p/d", ".")),
    "up through a link to the top": links(("x/up", ".."), ("y", "x/up/..")),
    "two links deep": links(("a/b/c", "../.."), ("a/l", "b/c"), ("m", "a/l/../..")),
    "a loop": links(("a", "b"), ("b", "a")),
}


@pytest.mark.parametrize("case", sorted(CHAINS_OUT))
def test_a_link_that_leaves_the_tree_through_other_links_is_refused(
    tmp_path: Path, case: str
) -> None:
    dest = tmp_path / "out"
    with pytest.raises(ArchiveRefusedError, match=r"outside the tree|too many links"):
        unpack_archive(written(tmp_path, tar_gz_of(CHAINS_OUT[case])), dest, LIMITS)
    assert not dest.exists()


def test_the_issue_s_chain_is_refused_in_a_zip_too(tmp_path: Path) -> None:
    body = zip_of({"p/model.py": b""}, {"p/d": ".", "p/e": "d/../.."})
    with pytest.raises(ArchiveRefusedError, match=r"link 'p/e' points outside the tree"):
        unpack_archive(written(tmp_path, body), tmp_path / "out", LIMITS)


def test_links_through_links_that_stay_inside_are_kept(tmp_path: Path) -> None:
    body = tar_gz_of(
        [
            file_entry("p/model.py", b"MODEL = 1\n"),
            *links(("p/d", "."), ("p/alias.py", "d/model.py"), ("top", "p/d/..")),
        ]
    )
    dest = tmp_path / "out"
    unpack_archive(written(tmp_path, body), dest, LIMITS)
    assert (dest / "p/alias.py").read_bytes() == b"MODEL = 1\n"
    assert (dest / "top").resolve() == dest.resolve()


def test_an_entry_behind_a_link_listed_after_it_is_refused(tmp_path: Path) -> None:
    body = tar_gz_of([file_entry("l/x.py", b"x"), *links(("l", "sub"))])
    with pytest.raises(ArchiveRefusedError, match=r"'l/x\.py' lies behind a link"):
        unpack_archive(written(tmp_path, body), tmp_path / "out", LIMITS)


def test_resolving_the_links_of_one_archive_is_bounded_work(tmp_path: Path) -> None:
    deep = "/".join(["a"] * 1000)
    body = tar_gz_of(links(*((f"l{i}", deep) for i in range(200))))
    limits = ArchiveLimits(max_files=1000, max_unpacked_bytes=1 << 20)
    with pytest.raises(ArchiveRefusedError, match="links take too long to resolve"):
        unpack_archive(written(tmp_path, body), tmp_path / "out", limits)
