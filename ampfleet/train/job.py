"""What a script's rank is told, and its place in the job: the script-mode environment
(`AMPFLEET_*` beside torchrun's), the job file in the attempt's run folder, the process group
and the device.

The environment says where things are; the job file says what the job asked for (the spec
as the API stored it: precision, AllReduce dtype, parallelism, checkpoint policy, stop), as
it does for the built-in loop's ranks (training/entry.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ampfleet.workers.rundir import RunDir
from ampfleet.workers.training.entry import StoredSpec
from ampfleet.workers.training.initial import Initial
from ampfleet.workers.training.rank import pick_device

RUN_DIR = "AMPFLEET_RUN_DIR"
OUTPUT_DIR = "AMPFLEET_OUTPUT_DIR"
CHECKPOINT_DIR = "AMPFLEET_CHECKPOINT_DIR"
HYPERPARAMETERS = "AMPFLEET_HYPERPARAMETERS"
INPUTS = "AMPFLEET_INPUTS"
JOB_ID = "AMPFLEET_JOB_ID"
ATTEMPT = "AMPFLEET_ATTEMPT"

DEFAULT_GROUP_TIMEOUT_S = 600.0
"""Where the job file names none (it always does on a node)."""


class NotInAJobError(RuntimeError):
    """The script runs outside a job: there is no run folder to read."""


@dataclass(frozen=True)
class RankJob:
    """One rank of a script's job, as the platform launched it."""

    run_dir: RunDir
    output_dir: Path
    checkpoint_dir: Path
    """The job's checkpoints, shared by its attempts, restored before each launch."""
    hyperparameters: dict[str, Any]
    inputs: dict[str, Path]
    job_id: str
    attempt: int
    spec: StoredSpec
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    process_group_timeout_s: float
    metrics_flush_s: float
    node: str
    initial: Initial | None = None
    """Another job's checkpoint to start from while this one has none (`init_from`)."""

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None) -> RankJob:
        env = os.environ if env is None else env
        if not env.get(RUN_DIR):
            raise NotInAJobError(
                f"{RUN_DIR} is not set: ampfleet.train.init() runs inside an ampfleet job "
                "(script mode), whose launcher sets it"
            )
        run_dir = RunDir(Path(env[RUN_DIR]))
        job: dict[str, Any] = json.loads(run_dir.job_file.read_text())
        rank = int(env.get("RANK", "0"))
        return cls(
            run_dir=run_dir,
            output_dir=Path(env.get(OUTPUT_DIR) or run_dir.output_dir),
            checkpoint_dir=Path(env.get(CHECKPOINT_DIR) or job["checkpoint_dir"]),
            hyperparameters=json.loads(env.get(HYPERPARAMETERS) or "{}"),
            inputs={name: Path(path) for name, path in json.loads(env.get(INPUTS) or "{}").items()},
            job_id=env.get(JOB_ID) or str(job.get("job_id", "")),
            attempt=int(env.get(ATTEMPT) or job.get("attempt") or 1),
            spec=StoredSpec.model_validate(job["spec"]),
            rank=rank,
            world_size=int(env.get("WORLD_SIZE", "1")),
            local_rank=int(env.get("LOCAL_RANK", str(rank))),
            local_world_size=int(env.get("LOCAL_WORLD_SIZE", "1")),
            process_group_timeout_s=float(
                job.get("process_group_timeout_s") or DEFAULT_GROUP_TIMEOUT_S
            ),
            metrics_flush_s=float(job.get("metrics_flush_s") or 0.0),
            node=str(job.get("node") or "node"),
            initial=Initial.of_job(job),
        )


def join_process_group(job: RankJob) -> tuple[torch.device, str]:
    """This rank's device and the group's backend: the group the script joined itself, or
    the one joined here from torchrun's environment (NCCL on CUDA, gloo on the CPU), with
    the job's timeout, as the built-in loop's ranks join it."""
    device, backend = pick_device(job.spec.resources.accelerator, job.local_rank)
    if dist.is_initialized():
        joined = str(dist.get_backend())
        if "nccl" in joined and device.type != "cuda":
            raise RuntimeError("the script joined an NCCL group, but this rank has no GPU")
        return device, "nccl" if "nccl" in joined else "gloo"
    dist.init_process_group(
        backend,
        timeout=timedelta(seconds=job.process_group_timeout_s),
        device_id=device if device.type == "cuda" else None,
    )
    return device, backend
