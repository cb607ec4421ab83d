"""Files in folders a rank can write, opened by the node agent without trusting the rank.

The agent runs outside the sandbox, often as root, and reads and writes inside each
attempt's run and checkpoint folders, which the attempt's ranks can rearrange at will: a
component replaced by a symbolic link to `/`, a file by a FIFO that blocks whoever opens it,
a temporary name planted as a link to `/etc/passwd` for the agent to write through. So every
path there is resolved by the kernel strictly beneath the folder (openat2's RESOLVE_BENEATH
with no symbolic links, magic links or mount crossings; the same rule walked component by
component with O_NOFOLLOW where openat2 is missing), opened without blocking, and accepted
only as a regular file or folder, checked on the descriptor itself (no race between the
check and the use). Writes create a fresh temporary file (O_EXCL, never through a link) and
rename it into place, which replaces a planted link rather than following it.

A name a rank gives (an absolute path in its records) is first placed lexically under one
of the folders it may name, with no `.` or `..` component; the kernel then does the rest.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePath, PurePosixPath

SYS_OPENAT2 = 437  # the same number on x86_64 and arm64 (Linux 5.6+)
RESOLVE_NO_XDEV = 0x01
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
_RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
MAX_LISTED = 100_000
"""Entries read from one folder: a rank can create millions of files; the agent reads on."""


class RefusedPathError(OSError):
    """The path leaves its folder, goes through a link, or is not a regular file/folder."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_openat2_works: bool | None = None


def _openat2(dir_fd: int, relative: str, flags: int, mode: int) -> int:
    how = _OpenHow(flags, mode if flags & os.O_CREAT else 0, _RESOLVE)
    fd = int(
        _libc.syscall(SYS_OPENAT2, dir_fd, relative.encode(), ctypes.byref(how), ctypes.sizeof(how))
    )
    if fd < 0:
        code = ctypes.get_errno()
        if code in (errno.ELOOP, errno.EXDEV):
            raise RefusedPathError(code, f"{relative}: leaves its folder or goes through a link")
        raise OSError(code, os.strerror(code), relative)
    return fd


def _walk(dir_fd: int, parts: list[str], flags: int, mode: int) -> int:
    """The same resolution by hand: each folder opened with O_NOFOLLOW | O_DIRECTORY."""
    current = os.dup(dir_fd)
    try:
        for part in parts[:-1]:
            try:
                following = os.open(part, _READ | os.O_DIRECTORY, dir_fd=current)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise RefusedPathError(exc.errno, f"{part}: a link or not a folder") from exc
                raise
            os.close(current)
            current = following
        try:
            return os.open(parts[-1], flags, mode, dir_fd=current)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise RefusedPathError(exc.errno, f"{parts[-1]}: a link") from exc
            raise
    finally:
        os.close(current)


def _parts(relative: str | PurePath) -> list[str]:
    text = str(relative)
    parts = text.split("/")
    if not text or text.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise RefusedPathError(errno.EINVAL, f"{text!r}: not a plain relative path")
    return parts


def open_beneath(root: int, relative: str | PurePath, flags: int = _READ, mode: int = 0) -> int:
    """A descriptor of `relative` beneath the folder open as `root`."""
    global _openat2_works  # noqa: PLW0603 - found out once per process
    parts = _parts(relative)
    flags |= os.O_NOFOLLOW | os.O_CLOEXEC
    if _openat2_works is not False:
        try:
            fd = _openat2(root, "/".join(parts), flags, mode)
            _openat2_works = True
            return fd
        except OSError as exc:
            if exc.errno not in (errno.ENOSYS, errno.EPERM) or _openat2_works:
                raise
            _openat2_works = False  # seccomp or an old kernel: walk instead
    return _walk(root, parts, flags, mode)


@contextlib.contextmanager
def folder(path: Path) -> Iterator[int]:
    """The descriptor of a folder the agent made itself (its path is the agent's own)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        yield fd
    finally:
        os.close(fd)


def open_regular(root: Path, relative: str | PurePath) -> int:
    """A descriptor of a regular file beneath `root`: never a FIFO, socket, device or link."""
    with folder(root) as dir_fd:
        fd = open_beneath(dir_fd, relative)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise RefusedPathError(errno.EINVAL, f"{relative}: not a regular file")
    os.set_blocking(fd, True)
    return fd


def read_bytes(root: Path, relative: str | PurePath, offset: int, limit: int) -> bytes:
    """Up to `limit` bytes of a regular file beneath `root`, from `offset`."""
    fd = open_regular(root, relative)
    try:
        return os.pread(fd, limit, offset)
    finally:
        os.close(fd)


def list_files(root: Path, relative: str | PurePath | None = None) -> list[str]:
    """The names of the regular files in a folder beneath `root` (or `root` itself),
    sorted; at most MAX_LISTED entries are looked at."""
    with folder(root) as dir_fd:
        fd = dir_fd if relative is None else open_beneath(dir_fd, relative, _READ | os.O_DIRECTORY)
        try:
            names = []
            with os.scandir(fd) as entries:
                for count, entry in enumerate(entries):
                    if count >= MAX_LISTED:
                        break
                    if entry.is_file(follow_symlinks=False):
                        names.append(entry.name)
            return sorted(names)
        finally:
            if fd != dir_fd:
                os.close(fd)


def write_atomic(root: Path, name: str, data: bytes) -> None:
    """`name` in folder `root` holds `data`: written to a fresh temporary file, then renamed
    over whatever `name` was (a planted link is replaced, never followed)."""
    if "/" in name:
        raise RefusedPathError(errno.EINVAL, f"{name!r}: one name, in the folder itself")
    tmp = f".{name}.{os.getpid()}.tmp"
    with folder(root) as dir_fd:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dir_fd)  # a leftover, or a planted link: unlink never follows
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, 0o644, dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb", closefd=False) as out:
                out.write(data)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def place(named: str, roots: Sequence[Path]) -> tuple[Path, PurePosixPath]:
    """Which of `roots` a path a rank named lies in, and its path relative to it, by name
    alone (no `.` or `..` component, nothing resolved). RefusedPathError when it lies in none."""
    path = PurePosixPath(named)
    if not path.is_absolute() or any(p in (".", "..") for p in named.split("/")[1:]):
        raise RefusedPathError(errno.EINVAL, f"{named!r}: not a plain absolute path")
    for root in roots:
        with contextlib.suppress(ValueError):
            relative = path.relative_to(PurePosixPath(root))
            if relative.parts:
                return root, relative
    raise RefusedPathError(errno.EACCES, f"{named!r}: outside the attempt's own folders")
