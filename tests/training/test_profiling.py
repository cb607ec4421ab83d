"""Profiles inside the ranks: two gloo ranks take a request at the same stop check, trace the
requested steps and report them; a withdrawn request stores nothing; one the run ends in
keeps the steps it captured. And the summary's arithmetic on crafted traces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist

from ampfleet.workers.profile_handover import hand_over
from ampfleet.workers.profile_request import ProfileRequest, request_file
from ampfleet.workers.rundir import RunDir
from ampfleet.workers.training.profile_summary import (
    combine,
    intersection,
    merged,
    overlap,
    phase_times,
    top_operators,
)
from tests.support.localranks import run_ranks
from tests.support.training import records, train_recipe


class Requests:
    """Stands in for the node agent: what the request file holds at each stop check (the
    loop asks `stop_requested` just before rank 0 reads the file). Rank 0 acts; every rank
    answers "do not stop"."""

    def __init__(self, run_dir: Path, script: dict[int, ProfileRequest | None]) -> None:
        self.run_dir = RunDir(run_dir)
        self.script = script
        self.checks = 0

    def __call__(self) -> bool:
        self.checks += 1
        if dist.get_rank() == 0 and self.checks in self.script:
            hand_over(self.run_dir, self.script[self.checks])
        return False


def _profiled_run(rank: int, world_size: int, out_dir: str) -> dict[str, Any]:
    script = {
        2: ProfileRequest("prf_b", steps=20, ranks=(1,)),  # taken at step 20 ...
        3: None,  # ... withdrawn at step 30
        4: ProfileRequest("prf_c", steps=20, ranks=None),  # taken at 40; the run ends at 45
    }
    if rank == 0:
        hand_over(RunDir(Path(out_dir)), ProfileRequest("prf_a", steps=3, ranks=None))
    dist.barrier()
    return train_recipe(
        rank,
        world_size,
        out_dir,
        precision="fp32",
        allreduce_dtype="bf16",  # the gloo ring on its own thread: communication to find
        max_steps=45,
        stop_requested=Requests(Path(out_dir), script),
        profiles=True,
    )


def _by_profile(found: list[dict[str, Any]], kind: str) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for record in found:
        if record["kind"] == kind and record.get("artifact_kind", "profile") == "profile":
            key = record.get("profile_id") or record["name"].split("/")[1]
            grouped.setdefault(key, []).append(record)
    return grouped


def test_ranks_trace_the_same_steps_and_report_them(tmp_path: Path) -> None:
    run_ranks(_profiled_run, 2, str(tmp_path))
    found = records(tmp_path)
    reports = _by_profile(found, "profile")
    artifacts = _by_profile(found, "artifact")

    a = {r["state"]: r for r in reports["prf_a"]}
    assert a["capturing"]["start_step"] == 11  # the first stop check is after step 10
    assert (a["uploading"]["start_step"], a["uploading"]["end_step"]) == (11, 13)
    names = sorted(r["name"] for r in artifacts["prf_a"])
    assert names == [
        "profiles/prf_a/rank-0.trace.json",
        "profiles/prf_a/rank-1.trace.json",
        "profiles/prf_a/summary.json",
    ]
    assert sorted(a["uploading"]["artifacts"]) == names
    for rank in (0, 1):
        trace = json.loads((tmp_path / f"profiles/prf_a/rank-{rank}.trace.json").read_text())
        ops = {e.get("name") for e in trace["traceEvents"]}
        assert {"aten::addmm", "aten::mm"} & ops, sorted(map(str, ops))[:50]
        assert {"ampfleet:step 11", "ampfleet:step 13", "ampfleet:backward"} <= ops
        assert "ampfleet:step 14" not in ops
    summary = json.loads((tmp_path / "profiles/prf_a/summary.json").read_text())
    assert summary == a["uploading"]["summary"]
    assert (summary["steps"], summary["device"], summary["allreduce_dtype"]) == (3, "cpu", "bf16")
    for rank in ("0", "1"):
        figures = summary["ranks"][rank]
        phases = figures["phases"]
        assert {"data", "forward", "backward", "optimizer"} <= set(phases["phases_s"])
        assert 0 < phases["backward_share"] < 1
        assert figures["top_operators"][0]["self_cpu_s"] > 0
        assert not any(op["name"].startswith("ampfleet:") for op in figures["top_operators"])
        assert figures["overlap"]["basis"] == "cpu operators"
        assert figures["overlap"]["communication_s"] > 0
        assert 0 <= figures["overlap"]["hidden_share"] <= 1
    assert summary["overall"]["step_time_s"] > 0

    # Withdrawn while capturing: taken, then dropped; nothing written or listed.
    assert [r["state"] for r in reports["prf_b"]] == ["capturing"]
    assert "prf_b" not in artifacts
    assert not (tmp_path / "profiles" / "prf_b").exists()

    # The run ended within it: the five steps it captured.
    c = {r["state"]: r for r in reports["prf_c"]}
    assert (c["uploading"]["start_step"], c["uploading"]["end_step"]) == (41, 45)
    assert c["uploading"]["summary"]["steps"] == 5


def test_a_request_file_reads_back_and_bad_ones_are_none(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path)
    request = ProfileRequest("prf_x", steps=4, ranks=(0, 2), record_shapes=True)
    hand_over(run_dir, request)
    assert ProfileRequest.from_json(request_file(run_dir).read_text()) == request
    assert request.traces(2)
    assert not request.traces(1)
    hand_over(run_dir, None)
    hand_over(run_dir, None)  # already gone: fine
    assert not request_file(run_dir).exists()
    for text in ("", "{}", "[]", '{"id": "p", "steps": "x", "ranks": null}'):
        assert ProfileRequest.from_json(text) is None


def test_unions_and_their_intersection() -> None:
    assert merged([(5, 6), (0, 2), (1, 3)]) == [(0, 3), (5, 6)]
    assert intersection(merged([(0, 3), (5, 6)]), merged([(2, 5.5)])) == 1.5
    assert intersection([], [(0, 1)]) == 0


def _event(name: str, ts: float, dur: float, tid: int = 1, cat: str = "cpu_op") -> dict[str, Any]:
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 7, "tid": tid}


def test_overlap_on_the_cpu_counts_aten_outside_communication() -> None:
    events = [
        _event("aten::mm", 0, 100),  # main thread: compute
        _event("c10d::allreduce_", 100, 50),  # main thread: launching the reduction
        _event("aten::copy_", 110, 10),  # inside it: part of the communication
        _event("gloo:all_reduce", 120, 200, tid=2, cat="user_annotation"),  # gloo's thread
        _event("aten::addmm", 200, 100),  # compute beside the reduction
        {"ph": "M", "name": "thread_name", "pid": 7, "tid": 2},
    ]
    figures = overlap(events, steps=2)
    assert figures["basis"] == "cpu operators"
    assert figures["communication_s"] == pytest.approx(220e-6 / 2)  # 100..320
    assert figures["compute_s"] == pytest.approx(200e-6 / 2)  # 0..100 and 200..300
    assert figures["overlapped_s"] == pytest.approx(100e-6 / 2)
    assert figures["hidden_share"] == pytest.approx(100 / 220)


def test_overlap_on_a_gpu_reads_kernels_only() -> None:
    events = [
        _event("aten::mm", 0, 1000),
        _event("ampere_sgemm_128x64", 0, 40, tid=7, cat="kernel"),
        _event("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 20, 40, tid=8, cat="kernel"),
    ]
    figures = overlap(events, steps=1)
    assert figures["basis"] == "device kernels"
    assert figures["hidden_share"] == 0.5
    assert overlap([_event("aten::mm", 0, 10)], steps=1)["hidden_share"] is None


class _Average:
    def __init__(self, key: str, self_cpu: float, device: float = 0.0) -> None:
        self.key, self.count = key, 3
        self.self_cpu_time_total, self.cpu_time_total = self_cpu, self_cpu * 2
        self.self_device_time_total = device


def test_top_operators_and_phases() -> None:
    averages = [_Average("aten::mm", 10, 300), _Average("ampfleet:backward", 99), _Average("x", 50)]
    on_cpu = top_operators(averages, on_device=False)
    assert [op["name"] for op in on_cpu] == ["x", "aten::mm"]
    assert "self_device_s" not in on_cpu[0]
    on_gpu = top_operators(averages, on_device=True, count=1)
    (mm,) = on_gpu
    assert (mm.pop("name"), mm.pop("calls")) == ("aten::mm", 3)
    assert mm == pytest.approx({"self_cpu_s": 1e-5, "cpu_total_s": 2e-5, "self_device_s": 3e-4})
    steps = [
        {"seconds": {"forward": 1.0, "backward": 2.0}, "step_time_s": 4.0},
        {"seconds": {"forward": 1.0, "backward": 4.0}, "step_time_s": 6.0},
    ]
    phases = phase_times(steps)
    assert phases["step_time_s"] == 5.0
    assert phases["phases_s"] == {"forward": 1.0, "backward": 3.0}
    assert phases["backward_share"] == 0.6
    overall = combine(
        [
            {"rank": 0, "phases": phases, "overlap": {"hidden_share": 0.2}},
            {"rank": 1, "phases": phases, "overlap": None},
            {"rank": 2, "error": "no"},
        ]
    )
    assert overall == {"step_time_s": 5.0, "backward_share": 0.6, "communication_hidden_share": 0.2}
