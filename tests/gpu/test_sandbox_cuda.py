"""CUDA works inside the sandbox of bundled code: the NVIDIA device nodes are bound in, the
rest of the data dir stays hidden."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ampfleet.core.sandbox import bubblewrap_problem, sandboxed
from ampfleet.workers.gpus import device_nodes

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(bubblewrap_problem() is not None, reason="needs a working bubblewrap"),
]

PROGRAM = (
    "import torch; x = torch.ones(1024, device='cuda'); "
    "print(torch.cuda.get_device_name(0), float((x @ x).item()))"
)


def test_a_sandboxed_rank_computes_on_the_gpu(tmp_path: Path) -> None:
    run_dir, checkpoints, code = (tmp_path / "var" / name for name in ("run", "ckpt", "code"))
    for folder in (run_dir, checkpoints, code):
        folder.mkdir(parents=True)
    (tmp_path / "var" / "ampfleet.db").write_text("hidden")
    command = sandboxed(
        [sys.executable, "-c", PROGRAM],
        data_dir=tmp_path / "var",
        writable=[run_dir, checkpoints],
        readable=[code],
    )
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().endswith("1024.0")


def test_an_attempt_sees_only_the_gpus_it_was_given(tmp_path: Path) -> None:
    """GPU 0's device node and the driver's shared ones, CUDA_VISIBLE_DEVICES=0: one device."""
    run_dir = tmp_path / "var" / "run"
    run_dir.mkdir(parents=True)
    command = sandboxed(
        [sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
        data_dir=tmp_path / "var",
        writable=[run_dir],
        readable=[],
        devices=device_nodes((0,)),
    )
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=300, check=False, env=env
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "1"


NCCL_PROGRAM = """
import os, torch, torch.distributed as dist
dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29533", rank=0, world_size=1)
x = torch.ones(1 << 20, device="cuda", dtype=torch.bfloat16)
dist.all_reduce(x)
torch.cuda.synchronize()
print(os.getuid(), float(x[0].item()))
dist.destroy_process_group()
"""


def test_cuda_and_nccl_work_in_the_full_confinement(tmp_path: Path) -> None:
    """The uid, cgroups, seccomp filter and loopback-only network of a single-node attempt
    (containment.py) leave CUDA and an NCCL collective working."""
    from ampfleet.core.settings import get_settings
    from ampfleet.workers.containment import Contained, UidPool
    from tests.support.env import environment

    values = {
        "AMPFLEET_DATA_DIR": str(tmp_path / "var"),
        "AMPFLEET_ENVIRONMENT": "test",
        "AMPFLEET_SECRET_KEY": "test-secret-not-for-production",
    }
    with environment(values):
        settings = get_settings()
        run_dir = tmp_path / "var" / "run"
        pool = UidPool(settings.sandbox_first_uid, settings.sandbox_uid_count)
        contained = Contained.prepare(
            settings, pool, name="gpu-test", nnodes=1, memory_mb=32 * 1024, writable=[run_dir]
        )
        try:
            command = contained.command(
                [sys.executable, "-c", NCCL_PROGRAM],
                settings,
                writable=[run_dir],
                readable=[],
                devices=device_nodes((0,)),
            )
            env = {
                **os.environ,
                **contained.environment(),
                "CUDA_VISIBLE_DEVICES": "0",
                "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            }
            result = subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
                env=env,
                preexec_fn=contained.enter,
                pass_fds=contained.pass_fds,
            )
        finally:
            contained.close()
    assert result.returncode == 0, result.stderr[-2000:]
    uid, value = result.stdout.split()
    assert uid != "0"
    assert float(value) == 1.0
