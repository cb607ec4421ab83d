"""`code.requirements` are names and versions only (core/requirements.py), and the node holds
to it too: it refuses anything else before pip runs, and its pip builds nothing from source
whatever the operator's pip options say. A source distribution whose setup code leaves a
mark shows whether pip ran it."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from ampfleet.core.requirements import requirement_problem
from ampfleet.core.settings import Settings
from ampfleet.workers.requirements import RequirementsError, ensure_env, pip_command

ACCEPTED = ["numpy", "numpy>=2", "einops==0.8.*", "pkg[a,b]>=1,<2", "numpy >= 2, != 2.1"]
REFUSED = [
    "pkg @ file:///srv/pkg-0.2.tar.gz",
    "pkg@https://example.com/pkg-0.2.tar.gz",
    "pkg[x] @ git+https://example.com/pkg.git",
    "git+https://example.com/pkg.git",
    "file:///srv/pkg-0.2.tar.gz",
    "https://example.com/pkg-0.2-py3-none-any.whl",
    "./pkg",
    "/srv/pkg",
    "pkg-0.2.tar.gz",
    "pkg-0.2-py3-none-any.whl",
    "-e .",
    "--index-url=https://example.com/simple",
    "-r other.txt",
    " --extra-index-url https://example.com",
    'numpy; python_version > "3"',
    "numpy --global-option=--build",
    "numpy==${VERSION}",
    "numpy # comment",
    "numpy\nnumpy @ file:///x",
    "",
    "x" * 201,
]


@pytest.mark.parametrize("requirement", ACCEPTED)
def test_names_extras_and_version_specifiers_are_accepted(requirement: str) -> None:
    assert requirement_problem(requirement) is None


@pytest.mark.parametrize("requirement", REFUSED)
def test_everything_else_is_refused_naming_the_requirement(requirement: str) -> None:
    problem = requirement_problem(requirement)
    assert problem is not None
    assert repr(requirement[:200]) in problem


def evil_sdist(folder: Path, marker: Path) -> Path:
    """An sdist of `evil` 0.2 whose setup.py writes `marker` when pip runs it."""
    files = {
        "evil-0.2/setup.py": f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"
        "from setuptools import setup\nsetup(name='evil', version='0.2', py_modules=[])\n",
        "evil-0.2/PKG-INFO": "Metadata-Version: 2.1\nName: evil\nVersion: 0.2\n",
    }
    folder.mkdir()
    sdist = folder / "evil-0.2.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return sdist


def node_settings(tmp_path: Path, pip_args: str) -> Settings:
    return Settings(data_dir=tmp_path / "var", broker_url="", sandbox="none", pip_args=pip_args)


def test_the_node_refuses_a_direct_reference_before_pip_runs(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    sdist = evil_sdist(tmp_path / "sdists", marker)
    settings = node_settings(tmp_path, "--no-index --no-build-isolation")
    requirement = f"evil @ file://{sdist}"
    with pytest.raises(RequirementsError) as refused:
        ensure_env(settings, ["numpy", requirement])
    assert repr(requirement) in str(refused.value)
    assert "direct reference" in str(refused.value)
    assert not marker.exists()
    assert not (settings.data_dir / "envs").exists()  # nothing was set up for the set


def test_the_operator_s_pip_options_cannot_turn_on_building_from_source(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    sdists = evil_sdist(tmp_path / "sdists", marker).parent
    settings = node_settings(
        tmp_path, f"--no-index --find-links {sdists} --no-binary :all: --no-build-isolation"
    )
    with pytest.raises(RequirementsError, match=r"evil==0\.2"):
        ensure_env(settings, ["evil==0.2"])
    assert not marker.exists()


def test_pip_s_sandbox_binds_no_gpu_device(tmp_path: Path) -> None:
    # Only a node with /dev/nvidia* can tell binding every device from binding none.
    settings = Settings(data_dir=tmp_path / "var", broker_url="", sandbox="bubblewrap")
    command = pip_command(settings, tmp_path / "env", ["numpy"], tmp_path)
    assert command[0].endswith("bwrap")
    assert "--dev-bind" not in command
    assert not [part for part in command if part.startswith("/dev/nvidia")]
