"""Packing a folder into the tar.gz a bundle or dataset upload sends.

What goes in: every regular file and link under the folder, minus what `.gitignore` and
`.ampignore` (same syntax, at the folder's top) leave out, minus version control, virtualenvs
and caches (`DEFAULT_EXCLUDES`). The archive is reproducible: members sorted, times, owners
and the gzip header fixed, so the same files pack to the same bytes and upload to the same
bundle (the API answers 200 and the node reuses its unpacked copy).

The ignore files follow gitignore's common forms: `name`, `dir/`, `*.ext`, `/rooted`,
`a/**/b`, and `!negation`; patterns are matched against the path relative to the folder.
"""

from __future__ import annotations

import gzip
import os
import re
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_EXCLUDES = (
    ".git/",
    ".hg/",
    ".svn/",
    ".venv/",
    "venv/",
    "env/",
    "__pycache__/",
    "*.pyc",
    ".mypy_cache/",
    ".pytest_cache/",
    ".ruff_cache/",
    ".ipynb_checkpoints/",
    "node_modules/",
    ".DS_Store",
)
IGNORE_FILES = (".gitignore", ".ampignore")


@dataclass
class Packed:
    archive: Path
    files: list[tuple[str, int]] = field(default_factory=list)
    """(relative path, size) of what went in."""
    left_out: list[str] = field(default_factory=list)
    """Relative paths left out (a folder's own path stands for everything under it)."""

    def largest(self, count: int = 5) -> list[tuple[str, int]]:
        return sorted(self.files, key=lambda item: -item[1])[:count]


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str]
    negated: bool
    only_dirs: bool


def _glob(part: str) -> str:
    """One path segment of a pattern as a regex: `*` and `?` never cross a `/`."""
    if part == "**":
        return ".*"
    out, i = [], 0
    while i < len(part):
        char = part[i]
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[" and "]" in part[i + 1 :]:
            end = part.index("]", i + 1)
            out.append("[" + part[i + 1 : end].replace("!", "^", 1) + "]")
            i = end
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)


def _compile(line: str) -> _Rule | None:
    line = line.strip()
    if not line or line.startswith("#"):
        return None
    negated = line.startswith("!")
    line = line.removeprefix("!")
    only_dirs = line.endswith("/")
    line = line.rstrip("/")
    anchored = "/" in line  # gitignore: a slash anywhere but the end roots the pattern
    body = "/".join(_glob(part) for part in line.lstrip("/").split("/"))
    prefix = "" if anchored else "(?:.*/)?"
    return _Rule(re.compile(rf"^{prefix}{body}$", re.S), negated, only_dirs)


def _rules(folder: Path) -> list[_Rule]:
    lines = list(DEFAULT_EXCLUDES)
    for name in IGNORE_FILES:
        path = folder / name
        if path.is_file():
            lines += path.read_text(errors="replace").splitlines()
    return [rule for rule in map(_compile, lines) if rule is not None]


def _ignored(relative: str, is_dir: bool, rules: list[_Rule]) -> bool:
    verdict = False
    for rule in rules:
        if rule.only_dirs and not is_dir:
            continue
        if rule.pattern.match(relative):
            verdict = not rule.negated
    return verdict


def _members(folder: Path, rules: list[_Rule]) -> tuple[list[Path], list[str]]:
    """Kept files and links (a link to a folder is kept as a link, never followed), and
    what was left out, as relative paths (a folder's own path, with a `/`, for all in it)."""
    kept: list[Path] = []
    left_out: list[str] = []
    for root, dirs, files in os.walk(folder):
        here = Path(root)
        for name in sorted(dirs):
            path = here / name
            relative = path.relative_to(folder).as_posix()
            if _ignored(relative, True, rules):
                left_out.append(relative + "/")
            elif path.is_symlink():
                kept.append(path)
            else:
                continue
            dirs.remove(name)
        for name in files:
            path = here / name
            if _ignored(path.relative_to(folder).as_posix(), False, rules):
                left_out.append(path.relative_to(folder).as_posix())
            else:
                kept.append(path)
    return sorted(kept), sorted(left_out)


def pack_folder(folder: Path, archive: Path) -> Packed:
    """Writes `folder`'s kept files to `archive` (tar.gz); what went in and what did not."""
    folder = folder.resolve()
    if not folder.is_dir():
        raise NotADirectoryError(f"{folder} is not a folder")
    kept, left_out = _members(folder, _rules(folder))
    packed = Packed(archive=archive, left_out=left_out)
    with (
        archive.open("wb") as raw,
        gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as zipped,
        tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for path in kept:
            relative = path.relative_to(folder).as_posix()
            info = tar.gettarinfo(str(path), arcname=relative)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            info.mode = 0o755 if info.mode & 0o111 else 0o644
            if info.isreg():
                with path.open("rb") as source:
                    tar.addfile(info, source)
                packed.files.append((relative, info.size))
            elif info.issym():
                tar.addfile(info)
                packed.files.append((relative, 0))
    return packed
