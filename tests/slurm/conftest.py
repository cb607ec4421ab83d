"""One real Slurm cluster per module (tests/support/slurm.py), two nodes on the network bed
where it can be built; skipped, with the reason, where Slurm cannot run. The end-to-end
modules share one fleet per module, whose scheduler talks to slurmrestd through a front the
tests steer (tests/support/rest_front.py), with JWT headers from a token file."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.fleet import Fleet, running_fleet
from tests.support.private_services import private_postgres, private_redis
from tests.support.rest_front import RestFront, rest_front
from tests.support.slurm import (
    POOL,
    SlurmCluster,
    cluster_for_tests,
    slurm_fleet_env,
    slurm_problem,
    write_node_settings,
)

WAIT_S = 300.0  # a bound on waiting, never an assertion about speed
SLURM_USER = "ampfleet"
TOKEN = "token-1"


@pytest.fixture(scope="module")
def slurm_cluster() -> Iterator[SlurmCluster]:
    problem = slurm_problem()
    if problem:
        pytest.skip(problem)
    with cluster_for_tests() as cluster:
        yield cluster


@pytest.fixture(scope="module")
def front(slurm_cluster: SlurmCluster) -> Iterator[RestFront]:
    """Passes everything on to slurmrestd until a test says otherwise (and says so back)."""
    with (
        tempfile.TemporaryDirectory(prefix="front-") as folder,  # a socket path stays short
        rest_front(Path(folder) / "rest.socket", slurm_cluster.socket_path) as serving,
    ):
        yield serving


@pytest.fixture(scope="module")
def fleet(
    slurm_cluster: SlurmCluster, front: RestFront, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Fleet]:
    root = tmp_path_factory.mktemp("slurm-fleet")
    token_file = root / "slurm.token"
    token_file.write_text(TOKEN)
    extra = {"AMPFLEET_SLURM_USER": SLURM_USER, "AMPFLEET_SLURM_TOKEN_FILE": str(token_file)}
    with slurm_fleet(root, slurm_cluster, url=front.url, extra_env=extra) as started:
        yield started


@contextmanager
def slurm_fleet(
    root: Path, cluster: SlurmCluster, *, url: str | None = None, **kwargs: Any
) -> Iterator[Fleet]:
    """A fleet whose one pool is `cluster`, waited for until every node of it is in
    /v1/nodes. On the bed its database and broker listen on the bed's root address, where
    the agents on the bed's hosts reach them."""
    env = {**slurm_fleet_env(cluster, root, url=url), **kwargs.pop("extra_env", {})}
    with ExitStack() as stack:
        servers: dict[str, str] = {}
        if cluster.bed is not None:
            address = cluster.service_address
            servers["database_url"] = stack.enter_context(
                private_postgres(address, durable=False)
            ).url
            servers["broker_url"] = stack.enter_context(private_redis(root, address)).url
        fleet = stack.enter_context(
            running_fleet(root / "fleet", nodes=(), extra_env=env, **servers, **kwargs)
        )
        write_node_settings(Path(env["AMPFLEET_SLURM_NODE_SETTINGS_FILE"]), fleet.env)
        fleet.wait_until(
            lambda: len(pool_nodes(fleet)) == len(cluster.node_names),
            timeout=WAIT_S,
            what="the Slurm pool's nodes in /v1/nodes",
        )
        yield fleet


def pool_nodes(fleet: Fleet) -> list[dict[str, Any]]:
    items = fleet.http.get("/v1/nodes").json()["items"]
    return [n for n in items if n["labels"].get("pool") == POOL]
