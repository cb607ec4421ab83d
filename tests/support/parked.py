"""A running fleet for the SDK and CLI tests, with a project whose jobs stay queued."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.fleet import Fleet, running_fleet

PARKED = "parked"


@contextmanager
def fleet_with_parked_project(root: Path) -> Iterator[Fleet]:
    """`running_fleet` on PostgreSQL and Redis, and a project `parked` with a quota of 0
    slots: jobs submitted there stay QUEUED, for tests that must not use the node."""
    with running_fleet(root) as fleet:
        response = fleet.http.put(f"/v1/projects/{PARKED}", json={"max_slots": 0})
        assert response.status_code == 200, response.text
        yield fleet
