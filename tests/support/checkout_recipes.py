"""The built-in recipes as this checkout's pyproject.toml registers them, for processes whose
installed ampfleet metadata predates them (an editable install made before a recipe was
added lists only the entry points it had then).

`install_checkout_recipes` writes a distribution of its own into a folder: put the folder
on sys.path (and clear `installed_recipes`' cache) or on PYTHONPATH, before the repository.
"""

from __future__ import annotations

import os
import sys
import tomllib
from pathlib import Path

from ampfleet.core import recipes
from ampfleet.core.recipes import ENTRY_POINT_GROUP

REPOSITORY = Path(__file__).resolve().parents[2]


def install_checkout_recipes(folder: Path) -> str:
    """Makes `folder` a site listing the checkout's recipes; returns the PYTHONPATH to use."""
    project = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())
    registered = project["project"]["entry-points"][ENTRY_POINT_GROUP]
    dist_info = folder / "ampfleet_checkout_recipes-0.dist-info"
    dist_info.mkdir(parents=True, exist_ok=True)
    (dist_info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: ampfleet-checkout-recipes\nVersion: 0\n"
    )
    lines = "".join(f"{name} = {target}\n" for name, target in registered.items())
    (dist_info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{lines}")
    return os.pathsep.join([str(folder), str(REPOSITORY)])


def use_checkout_recipes(folder: Path) -> str:
    """The same for this process too; returns the PYTHONPATH for its children."""
    path = install_checkout_recipes(folder)
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    recipes.installed_recipes.cache_clear()
    return path
