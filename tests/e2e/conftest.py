from __future__ import annotations

import pytest

from tests.support.fleet import FLEET_CONFIGURATIONS, Fleet, FleetFactory


@pytest.fixture(params=FLEET_CONFIGURATIONS)
def fleet(request: pytest.FixtureRequest, make_fleet: FleetFactory) -> Fleet:
    """A running one-node fleet on each of the two supported configurations (in `make
    test`, on one of them: see `one_fleet_configuration`)."""
    return make_fleet(request.param)
