"""Packing a folder for upload: the default exclusions, .gitignore and .ampignore forms
(names, folders, globs, rooted paths, `**`, negation), links kept as links."""

from __future__ import annotations

import tarfile
from pathlib import Path

from ampfleet.sdk.packing import pack_folder


def make(root: Path, files: list[str]) -> None:
    for name in files:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(name)


def test_ignore_rules_and_default_exclusions(tmp_path: Path) -> None:
    folder = tmp_path / "src"
    make(
        folder,
        [
            "pkg/__init__.py",
            "pkg/model.py",
            "pkg/__pycache__/model.cpython-311.pyc",
            ".git/HEAD",
            ".venv/bin/python",
            "run.log",
            "keep.log",
            "data/train.csv",
            "nested/data/kept.csv",
            "a/b/c/tmp.swp",
            "notes/draft.md",
        ],
    )
    (folder / ".gitignore").write_text("# logs\n*.log\n!keep.log\n/data/\n**/*.swp\n")
    (folder / ".ampignore").write_text("notes/\n")
    (folder / "pkg" / "alias.py").symlink_to("model.py")
    packed = pack_folder(folder, tmp_path / "out.tar.gz")
    kept = [path for path, _ in packed.files]
    assert kept == [
        ".ampignore",
        ".gitignore",
        "keep.log",
        "nested/data/kept.csv",
        "pkg/__init__.py",
        "pkg/alias.py",
        "pkg/model.py",
    ]
    assert packed.left_out == [
        ".git/",
        ".venv/",
        "a/b/c/tmp.swp",
        "data/",
        "notes/",
        "pkg/__pycache__/",
        "run.log",
    ]
    with tarfile.open(packed.archive) as archive:
        alias = archive.getmember("pkg/alias.py")
        assert alias.issym()
        assert alias.linkname == "model.py"


def test_the_same_files_pack_to_the_same_bytes(tmp_path: Path) -> None:
    folder = tmp_path / "src"
    make(folder, ["b.py", "a/c.py"])
    first = pack_folder(folder, tmp_path / "1.tar.gz").archive.read_bytes()
    (folder / "b.py").touch()
    second = pack_folder(folder, tmp_path / "2.tar.gz").archive.read_bytes()
    assert first == second
    (folder / "b.py").write_text("changed")
    assert pack_folder(folder, tmp_path / "3.tar.gz").archive.read_bytes() != first
