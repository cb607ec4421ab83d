"""The one rule for shared-filesystem inputs (`file:///...` in a spec's `inputs`): a path is
allowed when it is one of the operator's AMPFLEET_DATA_ROOTS or inside one. The API applies
it to the path as written; each node again after following links, against its own roots."""

from __future__ import annotations

import os
from pathlib import Path


def under_roots(path: Path, roots: list[Path]) -> bool:
    """`path` (made absolute and normal) is one of `roots` or inside one."""
    normal = Path(os.path.normpath(path))
    return any(normal.is_relative_to(Path(os.path.normpath(root))) for root in roots)
