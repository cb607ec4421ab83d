"""A fresh virtualenv holding ampfleet as a host that installs some of its extras would: the
wheel of the working tree and only the distributions its requirements name for those extras.

They are copied from this environment (no system site-packages, no index asked); pip then
installs the wheel there without an index, which fails if it needs anything not copied."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from importlib.metadata import Distribution, distribution
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent.parent
COMMAND_TIMEOUT_S = 120


def installed_venv(folder: Path, extras: set[str]) -> Path:
    """The venv under `folder` with ampfleet and `extras` (none: the client alone)."""
    wheel = build_wheel(folder)
    wanted = f"[{','.join(sorted(extras))}]" if extras else ""
    venv = folder / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)],
        check=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    python = venv / "bin" / "python"
    site_packages = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            check=True,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
        ).stdout.strip()
    )
    for installed in closure(needed(wheel_requirements(wheel), extras)).values():
        copy_into(installed, site_packages)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--python", str(python)]
    subprocess.run(
        [*pip, "install", "-q", "--no-index", "--no-cache-dir", f"{wheel}{wanted}"],
        check=True,
        capture_output=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    subprocess.run([*pip, "check"], check=True, capture_output=True, timeout=COMMAND_TIMEOUT_S)
    return venv


def build_wheel(folder: Path) -> Path:
    """The wheel of the working tree, built from a copy (a build writes into its source)."""
    source = folder / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "ampfleet", source / "ampfleet", ignore=shutil.ignore_patterns("__pycache__")
    )
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    subprocess.run(
        [*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(folder), str(source)],
        check=True,
        capture_output=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    (wheel,) = folder.glob("ampfleet-*.whl")
    return wheel


def wheel_requirements(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(archive.read(name).decode())
    return [Requirement(line) for line in metadata.get_all("Requires-Dist") or []]


def needed(requirements: list[Requirement], extras: set[str]) -> list[Requirement]:
    """The requirements that apply with these extras (none: the base install)."""
    return [
        r
        for r in requirements
        if r.marker is None or any(r.marker.evaluate({"extra": e}) for e in extras or {""})
    ]


def closure(requirements: list[Requirement]) -> dict[str, Distribution]:
    """The installed distributions these requirements need, theirs included."""
    found: dict[str, Distribution] = {}
    followed: set[tuple[str, frozenset[str]]] = set()  # a name, with the extras it was asked with
    pending = list(requirements)
    while pending:
        requirement = pending.pop()
        name = canonicalize_name(requirement.name)
        if (name, frozenset(requirement.extras)) in followed:
            continue
        followed.add((name, frozenset(requirement.extras)))
        installed = found.setdefault(name, distribution(requirement.name))
        theirs = [Requirement(line) for line in installed.requires or []]
        pending.extend(needed(theirs, set(requirement.extras)))
    return found


def copy_into(installed: Distribution, site_packages: Path) -> None:
    """A distribution's files under site-packages (its scripts stay behind)."""
    for file in installed.files or []:
        source = Path(str(installed.locate_file(file)))
        if ".." in file.parts or not source.is_file():
            continue
        target = site_packages / file
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)


def in_venv(
    venv: Path, *command: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """A command of the venv, from a folder with no ampfleet source and no `.env`."""
    return subprocess.run(
        [str(venv / "bin" / command[0]), *command[1:]],
        cwd=venv,
        env={"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(venv), **(env or {})},
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
