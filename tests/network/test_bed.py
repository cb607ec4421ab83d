"""The bed itself: hosts reach each other and the root side over their own links, the
collectives' interface is found from a host's address, and nothing outlives the bed."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from ampfleet.workers.launch import rank_environment
from tests.support import netbed
from tests.support.netbed import network_bed

pytestmark = pytest.mark.usefixtures("netbed_available")


def _names() -> tuple[set[str], set[str]]:
    namespaces = subprocess.run(
        ["ip", "netns", "list"], check=False, capture_output=True, text=True
    ).stdout
    links = subprocess.run(
        ["ip", "-o", "link", "show"], check=False, capture_output=True, text=True
    ).stdout
    return (
        {line.split()[0] for line in namespaces.splitlines() if line.startswith(netbed.PREFIX)},
        {
            line.split(":")[1].strip().split("@")[0]
            for line in links.splitlines()
            if netbed.PREFIX in line
        },
    )


def test_hosts_talk_over_their_links_and_nothing_is_left_behind() -> None:
    before = _names()
    with network_bed(3, rate="1gbit") as bed:
        assert all(name.startswith(bed.tag) for name in _names()[0] - before[0])
        probe = (
            "import socket, sys\n"
            "with socket.create_connection((sys.argv[1], 9), timeout=5) as s: pass\n"
        )
        # Nothing listens on port 9: a refusal proves the host answered, over the link.
        for source, target in ((0, bed.address(2)), (2, bed.address(1)), (1, bed.root_address)):
            done = subprocess.run(
                bed.command(source, [sys.executable, "-c", probe, target]),
                check=False,
                capture_output=True,
                text=True,
            )
            assert "ConnectionRefusedError" in done.stderr, done.stderr
        sent = bed.bytes_sent(0)
        assert sent > 0
        # Inside a host, its address is on eth0 and loopback is its own.
        script = (
            "import sys\nfrom ampfleet.workers.netif import interface_with_address\n"
            "print(interface_with_address(sys.argv[1]), interface_with_address('127.0.0.1'))"
        )
        assert bed.run(1, [sys.executable, "-c", script, bed.address(1)]).split() == [
            "eth0",
            "lo",
        ]
    assert _names() == before


def test_a_dead_process_beds_are_removed_by_the_next_one() -> None:
    """A test process killed outright cannot tear down: the next bed removes what a
    process that is gone left behind, and leaves the beds of live processes alone."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = f"{netbed.PREFIX}{dead.pid}-ff-0"
    subprocess.run(["ip", "netns", "add", stale], check=True)
    try:
        with network_bed(1) as bed:
            assert stale not in _names()[0]
            assert bed.namespace(0) in _names()[0]
    finally:
        subprocess.run(["ip", "netns", "delete", stale], check=False, capture_output=True)


def test_a_cut_link_passes_nothing_and_a_restored_one_carries_on() -> None:
    """Cut, a host's packets go nowhere and nothing answers (a connect times out, unlike the
    refusal of a reachable port); the connection opened before the cut survives it."""
    probe = (
        "import socket, sys, time\n"
        "kept = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)\n"
        "print('open', flush=True)\n"
        "sys.stdin.readline()\n"
        "try:\n"
        "    socket.create_connection((sys.argv[1], 9), timeout=2)\n"
        "except OSError as exc:\n"
        "    print(type(exc).__name__, flush=True)\n"
        "sys.stdin.readline()\n"
        "kept.sendall(b'after')\n"
        "kept.close()\n"
    )
    with network_bed(1) as bed, socket.create_server((bed.root_address, 0)) as server:
        port = str(server.getsockname()[1])
        client = subprocess.Popen(
            bed.command(0, [sys.executable, "-c", probe, bed.root_address, port]),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert client.stdin is not None
        assert client.stdout is not None
        try:
            assert client.stdout.readline().strip() == "open"
            accepted, _ = server.accept()
            with bed.link_cut(0):
                client.stdin.write("\n")
                client.stdin.flush()
                assert client.stdout.readline().strip() == "TimeoutError"
            client.stdin.write("\n")
            client.stdin.flush()
            accepted.settimeout(30)
            assert accepted.recv(16) == b"after"
            accepted.close()
            assert client.wait(timeout=30) == 0
        finally:
            client.kill()


def test_ranks_talk_on_the_interface_of_the_node_address_unless_the_operator_chose() -> None:
    with network_bed(1) as bed:
        script = (
            "import json, os, sys\nfrom ampfleet.workers.launch import rank_environment\n"
            "env = rank_environment(json.loads(sys.argv[2]), ranks_at_once=1, "
            "node_address=sys.argv[1])\n"
            "print(env.get('GLOO_SOCKET_IFNAME'), env.get('NCCL_SOCKET_IFNAME'))"
        )
        chosen = bed.run(0, [sys.executable, "-c", script, bed.address(0), "{}"])
        operator = bed.run(
            0, [sys.executable, "-c", script, bed.address(0), '{"NCCL_SOCKET_IFNAME": "ib0"}']
        )
    assert chosen.split() == ["eth0", "eth0"]
    assert operator.split() == ["eth0", "ib0"]
    # Without a node address the environment is what it was.
    assert "GLOO_SOCKET_IFNAME" not in rank_environment({}, ranks_at_once=1)
