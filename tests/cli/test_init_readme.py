"""The README `ampfleet init` writes links nowhere it cannot go: no placeholder link (a bare
host such as `https://github.com/`) for a newcomer to follow."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlparse

from tests.support.cli import cli


def test_the_written_readme_has_no_placeholder_link(tmp_path: Path) -> None:
    made = cli("init", "tidy-model", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    readme = (tmp_path / "tidy-model" / "README.md").read_text()
    assert readme.startswith("# tidy-model\n")
    links = re.findall(r"\]\(([^)]*)\)", readme) + re.findall(r"https?://\S+", readme)
    placeholders = [link for link in links if not urlparse(link).path.strip("/")]
    assert placeholders == []
    assert "ampfleet --help" in readme  # where to read on, instead
