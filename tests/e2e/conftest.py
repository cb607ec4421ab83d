from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.support.fleet import Fleet, running_fleet

FleetFactory = Callable[..., Fleet]


@pytest.fixture
def make_fleet(tmp_path: Path) -> Iterator[FleetFactory]:
    """Starts fleets of real processes; `backend` is "postgres+redis" or "embedded"."""
    with ExitStack() as stack:
        counter = iter(range(100))

        def start(backend: str = "postgres+redis", **kwargs: object) -> Fleet:
            root = tmp_path / f"fleet{next(counter)}"
            return stack.enter_context(running_fleet(root, backend, **kwargs))

        yield start


@pytest.fixture(params=["postgres+redis", "embedded"])
def fleet(request: pytest.FixtureRequest, make_fleet: FleetFactory) -> Fleet:
    """A running one-node fleet on each of the two supported configurations."""
    return make_fleet(request.param)
