"""A multi-node attempt's ranks keep the host's network, under the egress filter of their
uid (workers/egress.py, set by workers/containment.py): launched as ranks are (bubblewrap,
its uid, its cgroup, seccomp), the probe reaches a listener of its peer on an ephemeral port
and nothing else: not a low port of the same peer, not another host of the network, not
this host's loopback (a plain listener, the session's real Redis). Without the filter the
same uid reaches every one. The rules go with the attempt, even when its close fails half
way; those of a worker that died are cleared at the next one's start, and only those. Where
the filter cannot be set, a multi-node attempt is not launched."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from ampfleet.core.settings import get_settings
from ampfleet.workers import egress
from ampfleet.workers.containment import Contained, UidPool
from ampfleet.workers.doctor import egress_checks, probe
from tests.security.egress_support import (
    FIRST_UID,
    UID_COUNT,
    bed_of_two,
    held_uids,
    listening_in,
    loopback_listener,
    low_port,
    needs_filter,
    node_environment,
    unfiltered_probe,
)
from tests.support.env import environment

REFUSED = "refused: ConnectionRefusedError"


@needs_filter
def test_a_multi_node_rank_reaches_its_peers_ephemeral_ports_and_nothing_else(
    tmp_path: Path, redis_url: str
) -> None:
    redis = urlsplit(redis_url)
    with (
        node_environment(tmp_path),
        bed_of_two() as bed,
        listening_in(bed, 0, [0, low_port()]) as (peer_port, peer_low),
        listening_in(bed, 1, [0]) as (stranger_port,),
        loopback_listener() as loopback,
    ):
        peer, stranger = bed.address(0), bed.address(1)
        allowed = (peer, peer_port)
        refused = [
            (peer, peer_low),
            (stranger, stranger_port),
            loopback,
            (str(redis.hostname), int(redis.port or 6379)),
        ]
        targets = [allowed, *refused]
        without = unfiltered_probe(targets, tmp_path / "unfiltered")
        assert all(without[f"connect {h}:{p}"] == "done: 'connected'" for h, p in targets), without

        found = probe(get_settings(), {"connect": targets}, nnodes=2, peers=(peer,))
        assert int(found["uid"]) in range(FIRST_UID, FIRST_UID + UID_COUNT)
        assert found[f"connect {peer}:{peer_port}"] == "done: 'connected'"
        for host, port in refused:
            assert found[f"connect {host}:{port}"].startswith(REFUSED), (host, port, found)
        assert held_uids() == []  # gone with the attempt


@needs_filter
def test_the_rules_hold_the_attempt_s_uid_and_go_on_close_even_when_it_fails(
    tmp_path: Path,
) -> None:
    with node_environment(tmp_path), bed_of_two() as bed:
        settings = get_settings()
        pool = UidPool(settings.sandbox_first_uid, settings.sandbox_uid_count)
        contained = Contained.prepare(
            settings,
            pool,
            name=f"egress-{tmp_path.name}",
            nnodes=2,
            memory_mb=None,
            writable=[tmp_path / "run"],
            peers=(bed.address(0), bed.address(1)),
        )
        uid = contained.uid
        assert uid is not None
        (chain,) = egress.rules_of(uid)
        first, last = egress.ephemeral_ports()
        assert bed.address(0) in chain
        assert bed.address(1) in chain
        assert f"tcp dport {first}-{last} accept" in chain
        assert "ip6" not in chain  # no IPv6 peer: every IPv6 packet is rejected
        assert "reject" in chain

        def fails() -> None:
            raise OSError("the cgroup could not be removed")

        contained.tasks.remove = fails  # type: ignore[method-assign]
        with pytest.raises(OSError, match="cgroup"):
            contained.close()
        assert egress.rules_of(uid) == []
        assert uid in [pool.take() for _ in range(UID_COUNT - 1)]  # back in the pool


@needs_filter
def test_rules_set_by_an_attempt_that_failed_to_prepare_are_removed(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with node_environment(tmp_path), bed_of_two() as bed:
        settings = get_settings()
        pool = UidPool(settings.sandbox_first_uid, settings.sandbox_uid_count)
        with pytest.raises(OSError):
            Contained.prepare(
                settings,
                pool,
                name="egress-broken",
                nnodes=2,
                memory_mb=None,
                writable=[tmp_path / "file" / "run"],  # cannot be made
                peers=(bed.address(0),),
            )
        assert held_uids() == []


HOLD_AND_DIE = """
import os, sys
from ampfleet.workers import egress
egress.hold(int(sys.argv[1]), egress.to_peers([sys.argv[2]]))
os._exit(0)  # killed, as far as its rules know: never released
"""


@needs_filter
def test_a_dead_worker_s_rules_refuse_its_uid_until_the_next_start_clears_them(
    tmp_path: Path,
) -> None:
    stale, live = FIRST_UID + 1, FIRST_UID + 2
    with node_environment(tmp_path), bed_of_two() as bed:
        peers = egress.to_peers([bed.address(0)])
        subprocess.run([sys.executable, "-c", HOLD_AND_DIE, str(stale), bed.address(0)], check=True)
        assert held_uids() == [stale]
        with pytest.raises(egress.EgressError, match="File exists"):
            egress.hold(stale, peers)  # never taken over
        egress.hold(live, peers)
        try:
            assert egress.clear_stale(FIRST_UID, UID_COUNT) == [stale]
            assert held_uids() == [live]  # a live process's rules stay
        finally:
            egress.release(live)


@needs_filter
def test_pip_s_installs_at_once_share_its_uid_s_rules_until_the_last_ends(
    tmp_path: Path,
) -> None:
    uid = FIRST_UID
    with node_environment(tmp_path), bed_of_two() as bed:
        egress.hold(uid, egress.Allowed())
        egress.hold(uid, egress.to_peers([bed.address(0)]))
        (chain,) = egress.rules_of(uid)
        assert bed.address(0) in chain  # what both allow
        egress.release(uid)
        assert egress.rules_of(uid) != []
        egress.release(uid)
        assert egress.rules_of(uid) == []


def test_a_multi_node_attempt_is_not_launched_where_the_filter_cannot_be_set(
    tmp_path: Path,
) -> None:
    with (
        node_environment(tmp_path),
        bed_of_two() as bed,
        environment({"PATH": str(tmp_path / "no-tools")}),
    ):
        settings = get_settings()
        pool = UidPool(settings.sandbox_first_uid, settings.sandbox_uid_count)
        with pytest.raises(RuntimeError, match="egress filter") as refused:
            Contained.prepare(
                settings,
                pool,
                name="egress-refused",
                nnodes=2,
                memory_mb=None,
                writable=[tmp_path / "run"],
                peers=(bed.address(0),),
            )
        said = str(refused.value)
        assert "nftables" in said or "not root" in said, said
        (check,) = egress_checks(settings)
        assert check.held  # nothing runs unfiltered: the node refuses such attempts
        assert "refuses multi-node bundled attempts" in check.detail


@needs_filter
def test_the_nodes_self_check_of_the_egress_filter_holds(tmp_path: Path) -> None:
    with node_environment(tmp_path):
        checks = egress_checks(get_settings())
    assert [c for c in checks if not c.held] == []
    assert any("reaches its peer" in c.name for c in checks)
    assert any("127.0.0.1" in c.name and "cannot connect" in c.name for c in checks)
