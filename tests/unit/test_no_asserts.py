"""The product raises real errors, never `assert`s: an assert vanishes under `python -O`, and
its AssertionError says nothing a user or an operator can act on. Tests use them freely."""

from __future__ import annotations

import ast
from pathlib import Path

import ampfleet

PACKAGE_ROOT = Path(ampfleet.__file__).parent


def test_no_module_of_the_product_asserts() -> None:
    offences = [
        f"{path.relative_to(PACKAGE_ROOT)}:{node.lineno}"
        for path in sorted(PACKAGE_ROOT.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path)))
        if isinstance(node, ast.Assert)
    ]
    assert not offences, offences
