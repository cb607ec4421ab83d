"""The one dependency rule (README, package layout): api, scheduler and workers import
core, never each other. Read off every module's import statements, without importing it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ampfleet

PACKAGE_ROOT = Path(ampfleet.__file__).parent
SIBLINGS = ("api", "scheduler", "workers")


def _imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("package", SIBLINGS)
def test_package_imports_no_sibling(package: str) -> None:
    forbidden = tuple(f"ampfleet.{other}" for other in SIBLINGS if other != package)
    offences = [
        f"{path.relative_to(PACKAGE_ROOT)} imports {name}"
        for path in sorted((PACKAGE_ROOT / package).rglob("*.py"))
        for name in sorted(_imported_modules(path))
        if name in forbidden or name.startswith(tuple(f + "." for f in forbidden))
    ]
    assert not offences, offences
