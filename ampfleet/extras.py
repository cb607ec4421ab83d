"""Which of ampfleet's extras are installed.

`pip install ampfleet` is the client alone (SDK and CLI); each server process comes with an
extra of pyproject.toml (`api`, `scheduler`, `worker`, `db`; `all` is every one). A server
command checks its extra before it imports any of it, so a missing package is one line that
names the extra to install, not an ImportError's traceback. The extras are read from the
installed package's own metadata, so pyproject.toml stays the one list of what each needs.
"""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, distribution, requires

DISTRIBUTION = "ampfleet"
# A Requires-Dist line: `name[extras] >=1.0; extra == "api"`. Our extras carry no other
# marker, so the extra that brings a requirement is all of its marker we read.
_REQUIREMENT = re.compile(r"\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[(?P<extras>[^\]]*)\])?")
_EXTRA_MARKER = re.compile(r"""extra\s*==\s*["'](?P<extra>[^"']+)["']""")


def missing_packages(extra: str) -> list[str]:
    """The distributions `ampfleet[extra]` brings (with the extras it includes, such as
    `db`) that are not installed. Empty where ampfleet has no metadata (run from a source
    tree that was never installed): nothing then says what is missing."""
    try:
        requirements = requires(DISTRIBUTION) or []
    except PackageNotFoundError:
        return []
    by_extra: dict[str, list[tuple[str, list[str]]]] = {}
    for line in requirements:
        requirement, _, marker = line.partition(";")
        named = _REQUIREMENT.match(requirement)
        brought_by = _EXTRA_MARKER.search(marker)
        if named and brought_by:
            included = [e.strip() for e in (named["extras"] or "").split(",") if e.strip()]
            by_extra.setdefault(brought_by["extra"], []).append((named["name"], included))
    missing: set[str] = set()
    pending, seen = [extra], set()
    while pending:
        current = pending.pop()
        seen.add(current)
        for name, included in by_extra.get(current, []):
            if _normalized(name) == DISTRIBUTION:
                pending.extend(e for e in included if e not in seen)
            elif not _installed(name):
                missing.add(name)
    return sorted(missing)


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _installed(name: str) -> bool:
    try:
        distribution(name)
    except PackageNotFoundError:
        return False
    return True
