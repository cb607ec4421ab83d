"""pip installing a job's requirements, in its sandbox as the installer uid: with a local
index (`--no-index --find-links`, `file://`) it has no network at all; with one on the
network it reaches that index's address and port (and the resolvers) and nothing else: not
another port of the index's host, not another host, not this host's loopback. Its real
install goes through the filter; the rules go when pip is done. Without the filter, the
same sandbox reaches every one."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ampfleet.core.settings import get_settings
from ampfleet.workers import egress
from ampfleet.workers.requirements import (
    RequirementsError,
    ensure_env,
    env_python,
    index_endpoints,
    network_for_pip,
    pip_command,
)
from tests.security.egress_support import (
    FIRST_UID,
    bed_of_two,
    held_uids,
    listening_in,
    loopback_listener,
    needs_filter,
    node_environment,
    unfiltered_probe,
)
from tests.support.archives import build_wheel
from tests.support.env import environment
from tests.support.netbed import NetworkBed

REFUSED = "refused: ConnectionRefusedError"


def as_pip(tmp_path: Path, targets: list[tuple[str, int]]) -> dict[str, str]:
    """The probe's connections from pip's sandbox exactly as pip_command makes it (its uid,
    its network), run in place of pip."""
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    command = pip_command(get_settings(), tmp_path / "env", ["tinydep==0.1"], scratch)
    at = command.index("ampfleet.core.unprivileged")
    assert command[at + 1 : at + 3] == [str(FIRST_UID), "--"]
    probe = [sys.executable, "-m", "ampfleet.workers.sandbox_probe"]
    request = json.dumps({"connect": targets})
    done = subprocess.run(
        [*command[: at + 3], *probe, request], check=True, capture_output=True, timeout=120
    )
    return dict(json.loads(done.stdout.decode().strip().splitlines()[-1]))


@contextmanager
def index_in(bed: NetworkBed, host: int, root: Path) -> Iterator[int]:
    """An HTTP index (directory listings are simple-index pages to pip) in bed host `host`,
    on an ephemeral port; its port."""
    server = subprocess.Popen(
        bed.command(host, [sys.executable, "-u", "-m", "http.server", "-d", str(root), "0"]),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert server.stdout is not None
        yield int(server.stdout.readline().split(" port ")[1].split()[0])
    finally:
        server.kill()
        server.wait()


def test_where_pip_connects_follows_its_options() -> None:
    assert index_endpoints(["--no-index", "--find-links", "/wheels"]) == []
    assert index_endpoints(["--index-url", "file:///wheels", "--only-binary=:all:"]) == []
    assert index_endpoints([]) == [("pypi.org", 443), ("files.pythonhosted.org", 443)]
    assert index_endpoints(["-i", "http://index.internal:8080/simple"]) == [
        ("index.internal", 8080)
    ]
    assert index_endpoints(
        ["--index-url=https://a.internal/simple", "--extra-index-url", "https://b.internal/"]
    ) == [("a.internal", 443), ("b.internal", 443)]
    assert index_endpoints(["--proxy", "proxy.internal:3128"]) == [("proxy.internal", 3128)]
    assert index_endpoints(["--no-index", "-f", "/w", "--proxy", "proxy.internal:3128"]) == []


@needs_filter
def test_pip_with_a_local_index_has_no_network_at_all(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    build_wheel(wheels)
    with (
        node_environment(tmp_path, AMPFLEET_PIP_ARGS=f"--no-index --find-links {wheels}"),
        bed_of_two() as bed,
        listening_in(bed, 0, [0]) as (port,),
        loopback_listener() as loopback,
    ):
        targets = [(bed.address(0), port), loopback]
        without = unfiltered_probe(targets, tmp_path / "unfiltered")
        assert all(without[f"connect {h}:{p}"] == "done: 'connected'" for h, p in targets)

        found = as_pip(tmp_path, targets)
        assert found["uid"] == str(FIRST_UID)
        for host, target in targets:
            assert found[f"connect {host}:{target}"].startswith("refused"), (host, found)
        # It still installs, from the wheels.
        env = ensure_env(get_settings(), ["tinydep==0.1"])
        assert env_python(env).exists()
        assert held_uids() == []


@needs_filter
def test_pip_reaches_its_index_and_nothing_else(tmp_path: Path) -> None:
    index = tmp_path / "index" / "simple" / "tinydep"
    index.mkdir(parents=True)
    build_wheel(index)
    with bed_of_two() as bed, index_in(bed, 0, tmp_path / "index") as index_port:
        url = f"http://{bed.address(0)}:{index_port}/simple"
        options = f"--index-url {url} --trusted-host {bed.address(0)}"
        with (
            node_environment(tmp_path, AMPFLEET_PIP_ARGS=options),
            listening_in(bed, 0, [0]) as (other_port,),
            listening_in(bed, 1, [0]) as (stranger_port,),
            loopback_listener() as loopback,
        ):
            refused = [(bed.address(0), other_port), (bed.address(1), stranger_port), loopback]
            targets = [(bed.address(0), index_port), *refused]
            without = unfiltered_probe(targets, tmp_path / "unfiltered")
            assert all(without[f"connect {h}:{p}"] == "done: 'connected'" for h, p in targets)

            settings = get_settings()
            with network_for_pip(settings):
                found = as_pip(tmp_path, targets)
                assert egress.rules_of(settings.sandbox_first_uid) != []
            assert found[f"connect {bed.address(0)}:{index_port}"] == "done: 'connected'"
            for host, port in refused:
                assert found[f"connect {host}:{port}"].startswith(REFUSED), (host, port, found)
            assert held_uids() == []

            env = ensure_env(settings, ["tinydep==0.1"])  # through the filter, from the bed
            assert env_python(env).exists()
            assert held_uids() == []


def test_pip_on_the_network_does_not_run_where_the_filter_cannot_be_set(tmp_path: Path) -> None:
    options = "--index-url https://index.internal/simple"  # never asked: pip does not run
    with (
        node_environment(tmp_path, AMPFLEET_PIP_ARGS=options, AMPFLEET_SANDBOX="bubblewrap"),
        environment({"PATH": str(tmp_path / "no-tools")}),
        pytest.raises(RequirementsError, match="egress filter") as refused,
    ):
        ensure_env(get_settings(), ["tinydep==0.1"])
    assert "index.internal:443" in str(refused.value)
