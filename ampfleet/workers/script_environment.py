"""What a script (`code.command`) finds in its environment, besides torchrun's own (RANK,
LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...): the contract that
plain scripts and the rank-side API `ampfleet.train` read, named once here (README: "Script
mode"). Standard library only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

RUN_DIR = "AMPFLEET_RUN_DIR"
"""The attempt's run folder on this node (job.json, events.jsonl, hyperparameters.json)."""
OUTPUT_DIR = "AMPFLEET_OUTPUT_DIR"
"""Files rank 0 writes here become the job's `outputs/<path>` artifacts once it succeeds."""
CHECKPOINT_DIR = "AMPFLEET_CHECKPOINT_DIR"
"""The job's checkpoint folder, kept across its attempts (see script_checkpoints.py)."""
HYPERPARAMETERS = "AMPFLEET_HYPERPARAMETERS"
"""The spec's hyperparameters, a JSON object."""
INPUTS = "AMPFLEET_INPUTS"
"""The job's inputs, a JSON object: name -> path on this node (read-only)."""
INPUT_PREFIX = "AMPFLEET_INPUT_"
"""One variable per input: the name upper-cased, each other character than a letter or a
digit made `_` (`train-set` -> AMPFLEET_INPUT_TRAIN_SET)."""
MAX_STEPS = "AMPFLEET_MAX_STEPS"
"""The spec's stop.max_steps, where it gives one: the script's total (unset otherwise)."""
INIT_DIR = "AMPFLEET_INIT_DIR"
"""Where `init_from` names a checkpoint: its folder on this node (read-only), holding what
the other job saved there (a plain script's own files, or a platform checkpoint); only
while this job has no checkpoint of its own, which a restart resumes instead."""
INIT_LOAD = "AMPFLEET_INIT_LOAD"
"""`init_from.load` beside it: 'weights' (start from its weights) or 'full' (continue it)."""
PRECISION = "AMPFLEET_PRECISION"
"""The job's compute precision on this node (`auto` resolved for its hardware): bf16, fp16
or fp32; what `ampfleet.train` applies, for a plain script to apply as it likes."""
ALLREDUCE_DTYPE = "AMPFLEET_ALLREDUCE_DTYPE"
"""The spec's `allreduce_dtype`, as given (`auto` follows the precision)."""
JOB_ID = "AMPFLEET_JOB_ID"
ATTEMPT = "AMPFLEET_ATTEMPT"
"""The attempt's number, from 1; a restart (preemption, a lost node) is the next."""

_NOT_IN_A_NAME = re.compile(r"[^A-Z0-9]")


def input_variable(name: str) -> str:
    return INPUT_PREFIX + _NOT_IN_A_NAME.sub("_", name.upper())


def script_environment(
    inherited: Mapping[str, str],
    *,
    job: Mapping[str, Any],
    run_dir: Path,
    output_dir: Path,
    interpreter: str,
) -> dict[str, str]:
    """The script's environment: the rank's (torchrun's variables, the allow-listed rest),
    the contract's variables, and the job's interpreter's folder first on PATH, so `python`
    and the programs of its requirements environment are the job's."""
    spec = job["spec"]
    inputs = {str(name): str(path) for name, path in (job.get("inputs") or {}).items()}
    env = dict(inherited)
    env.update(
        {
            RUN_DIR: str(run_dir),
            OUTPUT_DIR: str(output_dir),
            CHECKPOINT_DIR: str(job["checkpoint_dir"]),
            HYPERPARAMETERS: json.dumps(spec.get("hyperparameters") or {}),
            INPUTS: json.dumps(inputs),
            JOB_ID: str(job["job_id"]),
            ATTEMPT: str(job["attempt"]),
            **{input_variable(name): path for name, path in inputs.items()},
        }
    )
    if (max_steps := (spec.get("stop") or {}).get("max_steps")) is not None:
        env[MAX_STEPS] = str(max_steps)
    env.update(_library_settings(spec, job.get("hardware") or {}))
    initial = job.get("init_from")
    if initial and Path(initial["path"]).is_dir():  # fetched: the job has no checkpoint yet
        env[INIT_DIR], env[INIT_LOAD] = str(initial["path"]), str(initial["load"])
    path = env.get("PATH", "")
    env["PATH"] = f"{Path(interpreter).parent}:{path}" if path else str(Path(interpreter).parent)
    return env


_ACCELERATE_PRECISION = {"bf16": "bf16", "fp16": "fp16", "fp32": "no"}


def _library_settings(spec: Mapping[str, Any], hardware: Mapping[str, Any]) -> dict[str, str]:
    """The job's fields in the documented variables of the libraries scripts train with:
    HF Accelerate reads them when an `Accelerator()` is made, and the HF Trainer through it
    (its `TrainingArguments` take ACCELERATE_MIXED_PRECISION unless `bf16=`/`fp16=` are
    given). A script's own arguments still win: these are defaults, not orders."""
    settings = {ALLREDUCE_DTYPE: str(spec.get("allreduce_dtype") or "auto")}
    precision = hardware.get("precision")
    if precision in _ACCELERATE_PRECISION:
        settings[PRECISION] = precision
        settings["ACCELERATE_MIXED_PRECISION"] = _ACCELERATE_PRECISION[precision]
    if (
        hardware.get("accelerator") == "cpu"
        or (spec.get("resources") or {}).get("accelerator") == "cpu"
    ):
        settings["ACCELERATE_USE_CPU"] = "true"
    parallelism = spec.get("parallelism") or {}
    if parallelism.get("strategy") == "fsdp":  # FSDP2, as the platform's own sharding
        settings.update(
            {
                "ACCELERATE_USE_FSDP": "true",
                "FSDP_VERSION": "2",
                "FSDP_RESHARD_AFTER_FORWARD": str(
                    bool(parallelism.get("reshard_after_forward", True))
                ).lower(),
                "FSDP_ACTIVATION_CHECKPOINTING": str(
                    parallelism.get("activation_checkpointing") == "full"
                ).lower(),
            }
        )
    return settings
