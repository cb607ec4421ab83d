"""The two commands install what each needs: `make run` the platform (torch first, then
`.[all]`) and no dev tool, `make test` torch, then `.[all]` with the dev extras in one pass,
and the Debian packages the tests use; each package target does nothing where its packages
are there. Read from `make -n` (what make would run) on a virtualenv path that does not
exist, so nothing is installed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def planned(target: str, tmp_path: Path) -> str:
    done = subprocess.run(
        ["make", "-n", "--no-print-directory", "-C", str(ROOT), target, f"VENV={tmp_path / 'v'}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def test_make_run_installs_the_platform_and_no_dev_tool(tmp_path: Path) -> None:
    plan = planned("run", tmp_path)
    torch, platform = plan.index('install -q "torch=='), plan.index('install -q -e ".[all]"')
    assert torch < platform
    assert ",dev" not in plan
    for tool in ("ruff", "mypy", "pytest"):
        assert f"/bin/{tool} " not in plan, tool
    assert "playwright" not in plan
    assert "chromium" not in plan
    # Bubblewrap only as root, and no failure to install it stops the service starting.
    assert 'if [ "$(id -u)" = 0 ]; then make' in plan
    assert "sandbox-deps || echo" in plan


def test_make_test_adds_the_dev_extras_and_the_packages_the_tests_use(tmp_path: Path) -> None:
    plan = planned("test", tmp_path)
    # Torch first, then the platform's extras with the dev tools in one pass.
    assert plan.index('install -q "torch==') < plan.index('install -q -e ".[all,dev,plot]"')
    assert '-e ".[all]"' not in plan
    for package in (
        "postgresql",
        "redis-server",
        "bubblewrap",
        "nftables",
        "chromium",
        "slurmctld",
    ):
        assert package in plan, package


NEEDED = {"bwrap": "sandbox-deps", "nft": "sandbox-deps", "redis-server": "services-deps"}


@pytest.mark.skipif(
    any(shutil.which(tool) is None for tool in NEEDED)
    or not list(Path("/usr/lib/postgresql").glob("*/bin/initdb")),
    reason="the packages are not all installed here",
)
def test_the_package_targets_do_nothing_where_the_packages_are_installed() -> None:
    done = subprocess.run(
        ["make", "-s", "--no-print-directory", "-C", str(ROOT), "sandbox-deps", "services-deps"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
