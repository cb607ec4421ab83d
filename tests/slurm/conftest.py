"""One real Slurm cluster per module (tests/support/slurm.py); skipped where it cannot run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.slurm import SlurmCluster, slurm_problem, start_cluster


@pytest.fixture(scope="module")
def slurm_cluster() -> Iterator[SlurmCluster]:
    problem = slurm_problem()
    if problem:
        pytest.skip(problem)
    with start_cluster(2) as cluster:
        yield cluster
