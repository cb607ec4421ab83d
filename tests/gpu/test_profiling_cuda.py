"""A profile on CUDA: the trace holds the device's kernels, and the summary ranks operators by
their device time and measures overlap on kernels. Marked `gpu`; self-contained (no service
fixtures), so it runs with `pytest --noconftest` on a bare GPU host."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ampfleet.workers.profile_handover import hand_over
from ampfleet.workers.profile_request import ProfileRequest
from ampfleet.workers.rundir import RecordReader, RunDir
from tests.support.cuda import digits_trainer, nccl

pytestmark = pytest.mark.gpu
__all__ = ["nccl"]  # the fixture: one NCCL rank on the first GPU


def test_a_profile_on_cuda_traces_kernels(nccl: torch.device, tmp_path: Path) -> None:
    hand_over(RunDir(tmp_path), ProfileRequest("prf_gpu", steps=3, ranks=None))
    trainer = digits_trainer(nccl, "bf16", tmp_path, steps=20)
    trainer.profiler.run_dir = RunDir(tmp_path)  # requests arrive in tmp_path
    trainer.run()
    trainer.writer.close()  # type: ignore[union-attr]

    records = RecordReader(tmp_path / "events.jsonl").read_new()
    (report,) = [r for r in records if r["kind"] == "profile" and r["state"] == "uploading"]
    assert (report["start_step"], report["end_step"]) == (11, 13)
    summary = report["summary"]
    figures = summary["ranks"]["0"]
    assert summary["device"] == "cuda"
    assert figures["overlap"]["basis"] == "device kernels"
    assert figures["overlap"]["compute_s"] > 0
    assert figures["top_operators"][0]["self_device_s"] > 0
    trace = json.loads((tmp_path / "profiles/prf_gpu/rank-0.trace.json").read_text())
    kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel"]
    assert kernels, "no CUDA kernel in the trace"
    names = {str(e.get("name")) for e in trace["traceEvents"]}
    assert {"ampfleet:step 11", "ampfleet:backward"} <= names
