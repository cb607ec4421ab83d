"""Ranks forked from a warm launcher train exactly as ranks that started cold, start with
nothing of the launcher's but what they need, and stop as cold ranks stop."""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest

from ampfleet.workers.process_title import rank_of_title
from tests.support.factories import job_spec
from tests.support.fleet import (
    Fleet,
    FleetFactory,
    losses,
    rank_processes,
    warm_launcher_ready,
)

pytestmark = pytest.mark.e2e

SEEDED = {"seed": 7, "stop": {"max_steps": 12}, "log_every_steps": 1, "precision": "fp32"}


def wait_until_warm(fleet: Fleet) -> None:
    fleet.wait_until(lambda: warm_launcher_ready(fleet), timeout=120, what="a warm launcher")


def started_warm(fleet: Fleet, job_id: str) -> bool:
    told = [e["message"] for e in fleet.events(job_id) if e["reason"] == "start_phases"]
    return any(message.startswith("warm start") for message in told)


def run_seeded(fleet: Fleet, *, warm: bool) -> tuple[list[tuple[int, float]], str]:
    if warm:
        fleet.wait_until(
            lambda: warm_launcher_ready(fleet), timeout=120, what="a warm launcher, imported"
        )
    job = fleet.submit(job_spec(**SEEDED))
    fleet.wait_for_state(job["id"], {"SUCCEEDED"})
    (event,) = [e for e in fleet.events(job["id"]) if e["reason"] == "start_phases"]
    return losses(fleet, job["id"]), event["message"]


def test_a_warm_start_trains_bit_for_bit_as_a_cold_one(make_fleet: FleetFactory) -> None:
    cold_fleet = make_fleet("embedded", extra_env={"AMPFLEET_RANK_LAUNCHER": "torchrun"})
    cold, cold_start = run_seeded(cold_fleet, warm=False)
    cold_fleet.stop()
    warm, warm_start = run_seeded(make_fleet("embedded"), warm=True)
    assert cold_start.startswith("cold start")
    assert warm_start.startswith("warm start")
    assert len(cold) == 12
    assert warm == cold  # the same floats: same seeds, same threads, same data order


def test_warm_ranks_hold_only_their_own_and_stop_on_cancel(fleet: Fleet) -> None:
    fleet.wait_until(
        lambda: warm_launcher_ready(fleet), timeout=120, what="a warm launcher, imported"
    )
    job = fleet.submit(job_spec(stop={"max_steps": 5_000_000}, log_every_steps=50))
    fleet.wait_for_state(job["id"], {"RUNNING"})
    fleet.wait_until(
        lambda: len(rank_processes(job["id"])) >= 3, timeout=30, what="the launcher, both ranks"
    )
    launcher = next(p for p in rank_processes(job["id"]) if "launcher" in _cmdline(p))
    ranks = [p for p in rank_processes(job["id"]) if p != launcher]
    assert sorted(_rank(p) for p in ranks) == [0, 1]
    for rank in ranks:
        assert psutil.Process(rank).ppid() == launcher
        assert os.getpgid(rank) == rank  # its own, as torchrun's ranks: the launcher passes
        assert os.getpgid(launcher) == launcher  # the agent's signals on
        held = _descriptors(rank)
        assert held[0] == os.devnull  # not the pipe the launch came through
        assert not [t for t in held.values() if t.endswith("warm-launcher.log")]
        assert {held[1], held[2]} == {
            str(Path(job_dir(fleet, job["id"])) / "logs" / f"rank-{_rank(rank)}.{stream}")
            for stream in ("stdout", "stderr")
        }
    # The node agent sees both ranks (its telemetry names them by their titles).
    both = {"cpu_percent_rank0", "cpu_percent_rank1"}
    fleet.wait_until(
        lambda: both <= set(fleet.job(job["id"])["latest_metrics"]),
        timeout=30,
        what="telemetry of both warm ranks",
    )
    fleet.wait_until(lambda: started_warm(fleet, job["id"]), timeout=30, what="a warm start")

    assert fleet.http.post(f"/v1/jobs/{job['id']}/cancel").status_code == 202
    fleet.wait_for_state(job["id"], {"CANCELLED"}, timeout=60)
    assert rank_processes(job["id"]) == []


def _cmdline(pid: int) -> str:
    return " ".join(psutil.Process(pid).cmdline())


def _rank(pid: int) -> int:
    rank = rank_of_title(psutil.Process(pid).cmdline())
    assert rank is not None
    return rank


def _descriptors(pid: int) -> dict[int, str]:
    folder = Path(f"/proc/{pid}/fd")
    return {int(fd.name): os.readlink(fd) for fd in folder.iterdir()}


def job_dir(fleet: Fleet, job_id: str) -> str:
    return str(fleet.node_data_dir("node-a") / "runs" / job_id / "attempt-1" / "node-0")
