"""Checks on an uploaded archive (zip or tar.gz) before anything in it is unpacked.

A bundle or a dataset arrives as one archive from outside the platform. Unpacking one blindly
is how a path like `../../etc/cron.d/x`, a symlink to `/`, a device node or a zip bomb gets
onto a node, so every entry is judged from the archive's own directory first: names stay
relative and inside the tree, links point inside it, only files, folders and such links are
allowed, and the count of entries and their unpacked bytes are capped. The reader stops at
the first entry past a cap, so a bomb costs only as much work as the caps allow. The API
checks on upload (a refusal is a 422 naming the entry); the worker checks again when it
unpacks (it trusts no byte of the store it did not check itself).

Links are kept (a bundle's `alias.py -> model.py` is ordinary), so each is resolved, not
read as text: its target is followed as the kernel will follow it once the tree is unpacked,
through the archive's other links, each `..` taken after the link before it, and must end
strictly inside the tree. `p/d -> .` with `p/e -> d/../..` reads as inside and is outside
once `d` is followed. Nothing may stand behind a link.

Standard library only: the API process imports it.
"""

from __future__ import annotations

import stat
import tarfile
import zipfile
import zlib
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

ZIP = "zip"
TAR_GZ = "tar.gz"
MAX_ENTRY_NAME = 1000
# A zip symlink's target is its content; a longer one is no path a tree needs.
MAX_LINK_TARGET = 4096
# Links followed while resolving one link, as the kernel's own bound (ELOOP past it), and
# path components walked while resolving all the links of one archive.
MAX_LINK_HOPS = 40
MAX_LINK_STEPS = 100_000


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
    target: str = ""  # a symlink's target, or the file a tar hard link repeats


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
    links: dict[str, str] = {}
    total = 0
    for name, kind, size, stated_target in raw:
        relative = _relative_name(name)
        if not relative:  # the tree itself ("./" of `tar -C dir .`)
            if kind != "dir":
                raise ArchiveRefusedError(f"entry {name[:200]!r} names the tree itself")
            continue
        if relative in seen:
            raise ArchiveRefusedError(f"entry {relative!r} appears twice")
        target = stated_target
        if kind == "symlink":
            _check_link(relative, target)
            links[relative] = target
        elif target:  # a hard link, to a file listed (and so checked) before it
            target = _relative_name(target)
        seen.add(relative)
        entries.append(ArchiveEntry(path=relative, size=size, kind=kind, target=target))
        if len(entries) > limits.max_files:
            raise ArchiveRefusedError(f"more than {limits.max_files} entries in the archive")
        total += size
        if total > limits.max_unpacked_bytes:
            raise ArchiveRefusedError(
                f"unpacks to more than {limits.max_unpacked_bytes} bytes (at {relative!r})"
            )
    # Judged once every link is known: an entry or a link target may name a link that the
    # archive lists only after it.
    for entry in entries:
        # A link is judged from where it stands; standing behind another link would move it.
        if any(parent.as_posix() in links for parent in PurePosixPath(entry.path).parents):
            raise ArchiveRefusedError(f"entry {entry.path!r} lies behind a link")
    resolver = _LinkResolver(links)
    for link in links:
        resolver.check(link)
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
    if PurePosixPath(target).is_absolute():
        raise ArchiveRefusedError(f"link {relative!r} points outside the tree ({target[:200]!r})")


class _LinkResolver:
    """Follows the archive's links as the kernel will once the tree is unpacked; a name that
    is no link counts as a folder (the strict reading: one that is missing cannot take a
    `..` out either). The work is bounded per archive, so links cannot make a bomb."""

    def __init__(self, links: dict[str, str]) -> None:
        self.links = links
        self.steps_left = MAX_LINK_STEPS
        self.link, self.hops = "", 0  # the link being checked, the links it passed

    def check(self, link: str) -> None:
        """Refuses `link` unless its target ends inside the tree."""
        self.link, self.hops = link, 0
        parent = PurePosixPath(link).parent.parts
        self._follow(["/".join(parent[: i + 1]) for i in range(len(parent))], self.links[link])

    def _follow(self, start: list[str], target: str) -> list[str]:
        here = list(start)  # the resolved path so far, as its growing prefixes
        for part in PurePosixPath(target).parts:
            self.steps_left -= 1
            if self.steps_left < 0:
                raise ArchiveRefusedError("the archive's links take too long to resolve")
            if part == "..":
                if not here:
                    passed = "" if self.hops == 0 else ", once the links it passes are followed"
                    shown = self.links[self.link][:200]
                    raise ArchiveRefusedError(
                        f"link {self.link!r} points outside the tree ({shown!r}{passed})"
                    )
                here.pop()
            elif part != ".":
                here.append(f"{here[-1]}/{part}" if here else part)
                if here[-1] in self.links:
                    self.hops += 1
                    if self.hops > MAX_LINK_HOPS:
                        raise ArchiveRefusedError(
                            f"link {self.link!r} passes too many links (a loop?)"
                        )
                    here = self._follow(here[:-1], self.links[here[-1]])
        return here


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
    sizes: dict[str, int] = {}
    with archive:
        try:
            while (member := archive.next()) is not None:
                if member.isreg():
                    sizes[member.name] = member.size
                    yield member.name, "file", member.size, ""
                elif member.isdir():
                    yield member.name.rstrip("/"), "dir", 0, ""
                elif member.issym():
                    yield member.name, "symlink", 0, member.linkname
                elif member.islnk():
                    # A hard link may only repeat a file listed before it.
                    if member.linkname not in sizes:
                        raise ArchiveRefusedError(
                            f"hard link {member.name[:200]!r} names no file of the tree"
                        )
                    # Unpacked as a copy: its bytes count again.
                    yield member.name, "file", sizes[member.linkname], member.linkname
                else:
                    raise ArchiveRefusedError(f"entry {member.name[:200]!r} is a device or pipe")
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise ArchiveRefusedError(f"not a readable tar.gz archive: {exc}") from None


def read_files(path: Path, names: Collection[str], limit: int) -> Iterator[tuple[str, bytes]]:
    """The bytes of the listed files `names` of a checked archive, in archive order, each
    read to at most `limit` + 1 bytes (so a caller sees that one is over its limit without
    the archive's stated size, which may lie, deciding how much is read)."""
    wanted = set(names)
    try:
        if archive_format(path) == ZIP:
            with zipfile.ZipFile(path) as archive:
                for info in archive.infolist():
                    name = _relative_name(info.filename)
                    if name in wanted and not info.is_dir():
                        with archive.open(info) as source:
                            yield name, source.read(limit + 1)
        else:
            with tarfile.open(path, mode="r:gz") as archive:
                for member in archive:
                    name = _relative_name(member.name)
                    content = archive.extractfile(member) if name in wanted else None
                    if content is not None:
                        with content:
                            yield name, content.read(limit + 1)
    except (zipfile.BadZipFile, zlib.error, tarfile.TarError, EOFError, OSError) as exc:
        raise ArchiveRefusedError(f"the archive is damaged: {exc}") from None


def unpack_archive(path: Path, dest: Path, limits: ArchiveLimits) -> list[ArchiveEntry]:
    """Checks the archive, then writes its entries under `dest` (which must not exist yet)
    itself, never through tarfile's or zipfile's extraction: folders, files, then the
    in-tree links, each file's bytes counted as they are written (a stated size may lie)."""
    kind, entries = inspect_archive(path, limits)
    dest.mkdir(parents=True)
    try:
        _write_entries(path, kind, entries, dest, limits)
    except (zipfile.BadZipFile, tarfile.TarError, EOFError) as exc:  # bytes that lie
        raise ArchiveRefusedError(f"the archive is damaged: {exc}") from None
    return entries


def _write_entries(
    path: Path, kind: str, entries: list[ArchiveEntry], dest: Path, limits: ArchiveLimits
) -> None:
    by_name = {entry.path: entry for entry in entries}
    for entry in entries:
        if entry.kind == "dir":
            (dest / entry.path).mkdir(parents=True, exist_ok=True)
    budget = [limits.max_unpacked_bytes]
    if kind == ZIP:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                stated = by_name.get(_relative_name(info.filename.rstrip("/")))
                if stated is not None and stated.kind == "file":
                    with archive.open(info) as source:
                        _copy(source, dest / stated.path, budget)
    else:
        with tarfile.open(path, mode="r:gz") as archive:
            for member in archive:
                listed = by_name.get(_relative_name(member.name))
                content = archive.extractfile(member) if member.isreg() else None
                if listed is not None and content is not None:
                    with content:
                        _copy(content, dest / listed.path, budget)
    for entry in entries:
        if entry.kind == "symlink":
            (dest / entry.path).parent.mkdir(parents=True, exist_ok=True)
            (dest / entry.path).symlink_to(entry.target)
        elif entry.kind == "file" and entry.target:
            with (dest / entry.target).open("rb") as source:
                _copy(source, dest / entry.path, budget)


def _copy(source: IO[bytes], target: Path, budget: list[int]) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("xb") as out:  # "x": never through a link or over a file
        while chunk := source.read(1 << 20):
            budget[0] -= len(chunk)
            if budget[0] < 0:
                raise ArchiveRefusedError(f"unpacks to more than it states (at {target.name!r})")
            out.write(chunk)
