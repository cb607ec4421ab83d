"""Checks on an uploaded archive (zip or tar.gz) before anything in it is unpacked.

A bundle or a dataset arrives as one archive from outside the platform. Unpacking one blindly
is how a path like `../../etc/cron.d/x`, a symlink to `/`, a device node or a zip bomb gets
onto a node, so every entry is judged from the archive's own directory first: names stay
relative and inside the tree, links point inside it, only files, folders and such links are
allowed, and the count of entries and their unpacked bytes are capped. The reader stops at
the first entry past a cap, so a bomb costs only as much work as the caps allow. The API
checks on upload (a refusal is a 422 naming the entry); the worker checks again when it
unpacks (it trusts no byte of the store it did not check itself).

Standard library only: the API process imports it.
"""

from __future__ import annotations

import stat
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

ZIP = "zip"
TAR_GZ = "tar.gz"
MAX_ENTRY_NAME = 1000
# A zip symlink's target is its content; a longer one is no path a tree needs.
MAX_LINK_TARGET = 4096


class ArchiveRefusedError(ValueError):
    """The archive is not one we unpack; the message names the entry and the rule."""


@dataclass(frozen=True)
class ArchiveLimits:
    max_files: int
    max_unpacked_bytes: int


@dataclass(frozen=True)
class ArchiveEntry:
    path: str  # relative, '/'-separated, normalised
    size: int  # bytes once unpacked; 0 for folders and links
    kind: str  # "file" | "dir" | "symlink"


def archive_format(path: Path) -> str:
    """ZIP or TAR_GZ by the file's first bytes (a client's Content-Type is only a hint)."""
    with path.open("rb") as source:
        head = source.read(4)
    if head[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        return ZIP
    if head[:2] == b"\x1f\x8b":
        return TAR_GZ
    raise ArchiveRefusedError("not a zip or tar.gz archive")


def inspect_archive(path: Path, limits: ArchiveLimits) -> tuple[str, list[ArchiveEntry]]:
    """The archive's format and entries, every rule checked; ArchiveRefusedError otherwise."""
    kind = archive_format(path)
    raw = _zip_entries(path) if kind == ZIP else _tar_entries(path)
    return kind, _checked(raw, limits)


def _checked(raw: Iterator[tuple[str, str, int, str]], limits: ArchiveLimits) -> list[ArchiveEntry]:
    entries: list[ArchiveEntry] = []
    seen: set[str] = set()
    links: set[str] = set()
    total = 0
    for name, kind, size, target in raw:
        relative = _relative_name(name)
        if not relative:  # the tree itself ("./" of `tar -C dir .`)
            if kind != "dir":
                raise ArchiveRefusedError(f"entry {name[:200]!r} names the tree itself")
            continue
        if relative in seen:
            raise ArchiveRefusedError(f"entry {relative!r} appears twice")
        # A link is judged from where it stands; standing behind another link would move it.
        if any(parent.as_posix() in links for parent in PurePosixPath(relative).parents):
            raise ArchiveRefusedError(f"entry {relative!r} lies behind a link")
        if kind == "symlink":
            _check_link(relative, target)
            links.add(relative)
        seen.add(relative)
        entries.append(ArchiveEntry(path=relative, size=size, kind=kind))
        if len(entries) > limits.max_files:
            raise ArchiveRefusedError(f"more than {limits.max_files} entries in the archive")
        total += size
        if total > limits.max_unpacked_bytes:
            raise ArchiveRefusedError(
                f"unpacks to more than {limits.max_unpacked_bytes} bytes (at {relative!r})"
            )
    return entries


def _relative_name(name: str) -> str:
    if not name or len(name) > MAX_ENTRY_NAME:
        raise ArchiveRefusedError(f"entry name is empty or longer than {MAX_ENTRY_NAME}")
    if "\\" in name or "\x00" in name:
        raise ArchiveRefusedError(f"entry {name[:200]!r}: use '/' separators, no NUL or '\\'")
    pure = PurePosixPath(name)
    if pure.is_absolute():
        raise ArchiveRefusedError(f"entry {name[:200]!r} is an absolute path")
    if ".." in pure.parts:
        raise ArchiveRefusedError(f"entry {name[:200]!r} leaves the tree ('..')")
    normal = pure.as_posix()
    return "" if normal == "." else normal


def _check_link(relative: str, target: str) -> None:
    if not target or len(target) > MAX_LINK_TARGET or "\x00" in target:
        raise ArchiveRefusedError(f"link {relative!r} has an empty or unusable target")
    pure = PurePosixPath(target)
    if pure.is_absolute():
        raise ArchiveRefusedError(f"link {relative!r} points outside the tree ({target[:200]!r})")
    depth = len(PurePosixPath(relative).parent.parts)
    for part in pure.parts:
        depth += -1 if part == ".." else 0 if part == "." else 1
        if depth < 0:
            raise ArchiveRefusedError(
                f"link {relative!r} points outside the tree ({target[:200]!r})"
            )


def _zip_entries(path: Path) -> Iterator[tuple[str, str, int, str]]:
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise ArchiveRefusedError(f"not a readable zip archive: {exc}") from None
    with archive:
        for info in archive.infolist():
            # The Unix file type, where the tool that made the zip stored one (0 otherwise).
            mode = info.external_attr >> 16
            if stat.S_ISLNK(mode):
                if info.file_size > MAX_LINK_TARGET:
                    raise ArchiveRefusedError(f"link {info.filename[:200]!r}: target too long")
                target = archive.read(info).decode("utf-8", "replace")
                yield info.filename.rstrip("/"), "symlink", 0, target
            elif stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):
                raise ArchiveRefusedError(f"entry {info.filename[:200]!r} is a device or pipe")
            elif info.is_dir():
                yield info.filename.rstrip("/"), "dir", 0, ""
            else:
                yield info.filename, "file", info.file_size, ""


def _tar_entries(path: Path) -> Iterator[tuple[str, str, int, str]]:
    try:
        archive = tarfile.open(path, mode="r:gz")  # noqa: SIM115 - closed below
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ArchiveRefusedError(f"not a readable tar.gz archive: {exc}") from None
    names: set[str] = set()
    with archive:
        try:
            while (member := archive.next()) is not None:
                if member.isreg():
                    names.add(member.name)
                    yield member.name, "file", member.size, ""
                elif member.isdir():
                    yield member.name.rstrip("/"), "dir", 0, ""
                elif member.issym():
                    yield member.name, "symlink", 0, member.linkname
                elif member.islnk():
                    # A hard link may only repeat a file listed before it.
                    if member.linkname not in names:
                        raise ArchiveRefusedError(
                            f"hard link {member.name[:200]!r} names no file of the tree"
                        )
                    yield member.name, "file", 0, ""
                else:
                    raise ArchiveRefusedError(f"entry {member.name[:200]!r} is a device or pipe")
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise ArchiveRefusedError(f"not a readable tar.gz archive: {exc}") from None
