from __future__ import annotations

import pytest

from tests.support.fleet import Fleet, FleetFactory


@pytest.fixture(params=["postgres+redis", "embedded"])
def fleet(request: pytest.FixtureRequest, make_fleet: FleetFactory) -> Fleet:
    """A running one-node fleet on each of the two supported configurations."""
    return make_fleet(request.param)
