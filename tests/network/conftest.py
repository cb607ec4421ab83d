"""Tests on the multi-host network bed (tests/support/netbed.py): skipped, with the reason,
where this process may not create network namespaces."""

from __future__ import annotations

import pytest

from tests.support.netbed import unavailable_reason


@pytest.fixture(scope="session")
def netbed_available() -> None:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(f"network bed unavailable: {reason}")
