"""From inside the sandbox, launched as ranks are (uid, cgroups, seccomp, network, folders:
workers/containment.py), a hostile tenant's probes fail: secrets unread, every control-plane
port and another job's rendezvous store unreachable, no new namespace, no ptrace, no mount,
/tmp bounded, shared memory counted by the memory limit, no file past the disk limit. The
node's own self check (`ampfleet doctor`) says the same."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from ampfleet.core.sandbox import bubblewrap_problem
from ampfleet.core.settings import get_settings
from ampfleet.workers.doctor import check_node, probe
from tests.support.env import environment

pytestmark = pytest.mark.skipif(
    bubblewrap_problem() is not None, reason="needs a working bubblewrap"
)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[None]:
    values = {
        "AMPFLEET_DATA_DIR": str(tmp_path / "var"),
        "AMPFLEET_ENVIRONMENT": "test",
        "AMPFLEET_SECRET_KEY": "test-secret-not-for-production",
        "AMPFLEET_SANDBOX_TMP_MB": "64",
        "AMPFLEET_SANDBOX_MAX_DISK_MB": "128",
    }
    with environment(values):
        yield


@pytest.fixture
def other_jobs_store() -> Iterator[int]:
    """A listening socket on the host's loopback, as another job's rendezvous store is."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


def test_the_probes_of_a_hostile_tenant_fail(node: None, other_jobs_store: int) -> None:
    settings = get_settings()
    found = probe(
        settings,
        {
            "read": ["/etc/shadow", str(settings.data_dir.resolve() / "ampfleet.db")],
            "connect": [["127.0.0.1", other_jobs_store], ["127.0.0.1", 5432], ["::1", 6379]],
            "tmp_mb": 80,
            "file_mb": 140,
            "shared_mb": settings.sandbox_tmp_mb + 1024,
        },
    )
    assert found["uid"] != "0"
    if os.geteuid() == 0:
        assert int(found["uid"]) > settings.sandbox_first_uid
    for key in (
        "read /etc/shadow",
        f"connect 127.0.0.1:{other_jobs_store}",
        "connect 127.0.0.1:5432",
        "connect ::1:6379",
        "new user namespace",
        "ptrace",
        "mount",
        "fill /tmp",
        "one big file",
    ):
        assert found[key].startswith("refused"), (key, found[key])
    assert "No space left" in found["fill /tmp"]
    assert "File too large" in found["one big file"]
    assert found["shared memory"] == "killed by signal 9"
    assert found["mmap"].startswith("done")  # what training needs still works


def test_the_nodes_self_check_holds(node: None) -> None:
    checks = check_node(get_settings())
    assert [c for c in checks if not c.held] == []
    assert len(checks) > 10
