"""NVML telemetry of a rank that holds device memory. Marked `gpu`; self-contained (no
service fixtures), so it runs with `pytest --noconftest` on a bare GPU host."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
import torch

from ampfleet.workers.telemetry import Nvml, RankTelemetry

pytestmark = pytest.mark.gpu
HELD_MB = 1024
HOLDING = (
    "import time, torch\n"
    f"held = torch.ones({HELD_MB} << 18, device='cuda')\n"  # float32: 4 bytes each
    "torch.cuda.synchronize()\nprint('ready', flush=True)\ntime.sleep(60)\n"
)


@pytest.fixture
def rank_on_gpu() -> Iterator[subprocess.Popen[str]]:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDING],
        env={**os.environ, "RANK": "0"},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        yield child
    finally:
        child.kill()
        child.wait(timeout=30)


@pytest.mark.usefixtures("rank_on_gpu")
def test_device_memory_and_utilisation_per_rank() -> None:
    nvml = Nvml.open()
    assert nvml is not None, "a CUDA device without NVML"
    values = RankTelemetry(os.getpid(), interval_s=0.0, nvml=nvml).sample()
    assert values["gpu_memory_mb_rank0"] >= HELD_MB
    assert 0.0 <= values["gpu_util_percent_rank0"] <= 100.0
    assert values["rss_mb_rank0"] > 0
