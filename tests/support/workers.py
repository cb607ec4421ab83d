"""The test run split over processes (`pytest -n`, pytest-xdist): what each worker process
holds of its own where the machine has one of a thing.

Each worker starts its own PostgreSQL, Redis and S3 servers (services.py, seaweedfs.py) and
its fleets pick free ports; what is left is shared by every process of the host: the
sandbox's uids (the egress filter matches them, one nftables table per network namespace)
and the network bed's subnets (bridges of the root namespace).
"""

from __future__ import annotations

import os

from ampfleet.core.settings import Settings

_FIELDS = Settings.model_fields
SANDBOX_FIRST_UID = int(_FIELDS["sandbox_first_uid"].default)
"""AMPFLEET_SANDBOX_FIRST_UID's default, the first worker's range."""
SANDBOX_UID_SPAN = 2 * int(_FIELDS["sandbox_uid_count"].default)
"""Apart from one worker's range to the next: twice AMPFLEET_SANDBOX_UID_COUNT's default."""


def worker_index() -> int:
    """0, 1, ... for xdist's gw0, gw1, ...; 0 in a run that is not split."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(name.removeprefix("gw")) if name.removeprefix("gw").isdigit() else 0


def sandbox_environment() -> dict[str, str]:
    """This worker's sandbox uids, unless the caller's environment names some: two workers'
    fleets with the same uids would share egress rules and refuse each other's ranks."""
    if "AMPFLEET_SANDBOX_FIRST_UID" in os.environ:
        return {}
    first = SANDBOX_FIRST_UID + worker_index() * SANDBOX_UID_SPAN
    return {"AMPFLEET_SANDBOX_FIRST_UID": str(first)}
