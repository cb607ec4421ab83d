"""Archives built in memory for upload tests, well-formed or hostile on purpose."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import stat
import tarfile
import zipfile
from pathlib import Path


def zip_of(files: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    """A zip of `files` (name -> bytes) and symlinks (name -> target) as Unix zip tools store
    them: the mode in the high bits of external_attr, the target as the content."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
        for name, target in (links or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            archive.writestr(info, target)
    return buffer.getvalue()


def tar_gz_of(members: list[tuple[tarfile.TarInfo, bytes]]) -> bytes:
    """The same bytes for the same members, whenever it runs (gzip's header time is 0)."""
    buffer = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as compressed,
        tarfile.open(fileobj=compressed, mode="w") as archive,
    ):
        for info, data in members:
            info.size = len(data) if info.isreg() else 0
            archive.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return buffer.getvalue()


def file_entry(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), data


def special_entry(name: str, kind: bytes, target: str = "") -> tuple[tarfile.TarInfo, bytes]:
    """A tar entry of another type: tarfile.SYMTYPE, LNKTYPE, CHRTYPE, FIFOTYPE, ..."""
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info, b""


def allow_custom_code(*projects: str) -> None:
    """Projects whose write keys may upload and run bundles (an admin's PUT, in short)."""
    from ampfleet.core.db import session_scope
    from ampfleet.core.models import Project

    with session_scope() as session:
        for name in projects:
            session.merge(Project(name=name, allow_custom_code=True))


def build_wheel(folder: Path, name: str = "tinydep", version: str = "0.1") -> Path:
    """A pure-Python wheel written by hand (no build backend, no index)."""
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": b'GREETING = "hello from tinydep"\n',
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    records = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        records.append(f"{path},sha256={digest},{len(data)}")
    files[f"{info}/RECORD"] = ("\n".join([*records, f"{info}/RECORD,,"]) + "\n").encode()
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return wheel
