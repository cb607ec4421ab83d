"""The `ampfleet` command line as a user runs it: `python -m ampfleet.cli` in a subprocess, in
a folder of the test's choosing, its output captured."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ampfleet.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
