"""What a completed run hands over besides the model: the files it wrote into `outputs/`, and
the pieces every manifest shares (what made it, the packages' versions), for the platform's
loop (export.py) and for a script (script.py) alike.

Standard library only: a script's rank process imports no torch of its own.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from ampfleet.core.artifact_names import is_valid_name, output_name
from ampfleet.workers.rundir import RecordWriter

MANIFEST_FORMAT = 1
# What the run leaves in its output folder is listed as it is; past these it is not (a
# runaway run must not turn into a million rows), and the manifest says what was left.
MAX_OUTPUT_FILES = 1000


@dataclass(frozen=True)
class ExportedFile:
    kind: str  # model | output
    name: str
    path: Path
    size: int
    sha256: str
    details: dict[str, Any]


def recipe_label(spec: dict[str, Any]) -> str:
    """What made the run: the registered recipe, or a bundle's entrypoint or command, and
    the bundle's content."""
    code = spec.get("code")
    if not code:
        return str(spec["recipe"])
    what = code.get("entrypoint") or shlex.join(code.get("command") or [])
    return f"{what} (bundle {code['bundle']}, sha256 {code.get('sha256')})"


def collect_outputs(output_dir: Path) -> tuple[list[ExportedFile], list[str]]:
    """The run's output files (regular files only: a link could name anything on the
    node), as `outputs/<relative path>`; and the paths not listed, with why."""
    found: list[ExportedFile] = []
    left_out: list[str] = []
    for path in regular_files(output_dir):
        relative = path.relative_to(output_dir).as_posix()
        name = output_name(relative)
        if not is_valid_name(name):
            left_out.append(f"{relative}: not a valid artifact name (letters, digits, . _ -)")
        elif len(found) >= MAX_OUTPUT_FILES:
            left_out.append(f"{relative}: more than {MAX_OUTPUT_FILES} output files")
        else:
            found.append(described(path, "output", name, {}))
    return found, left_out


def write_artifact_records(
    writer: RecordWriter, files: list[ExportedFile], step: int | None
) -> None:
    """One `artifact` record per file, flushed: the agent uploads and lists each."""
    for exported in files:
        writer.write(
            "artifact",
            artifact_kind=exported.kind,
            name=exported.name,
            paths=[str(exported.path)],
            step=step,
            details={**exported.details, "sha256": exported.sha256, "size": exported.size},
        )
    writer.flush()


def package_versions(*packages: str) -> dict[str, str]:
    """Python's and each installed package's version, for a manifest."""
    found = {"python": platform.python_version()}
    for package in packages:
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            continue
    return found


def described(path: Path, kind: str, name: str, details: dict[str, Any]) -> ExportedFile:
    return ExportedFile(kind, name, path, path.stat().st_size, sha256_of(path), details)


def sha256_of(path: Path) -> str:
    with path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def atomic_write(path: Path, write: Callable[[Path], object]) -> None:
    """Written under a temporary name, fsynced, renamed: the agent never uploads half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    descriptor = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    tmp.replace(path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def regular_files(root: Path) -> Iterator[Path]:
    """The regular files beneath `root`, in order; links are neither followed nor listed."""
    if not root.is_dir():
        return
    for directory, subdirectories, names in os.walk(root):  # os.walk follows no links
        subdirectories.sort()
        for name in sorted(names):
            path = Path(directory, name)
            if path.is_file() and not path.is_symlink():
                yield path
