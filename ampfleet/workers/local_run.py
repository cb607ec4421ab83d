"""`ampfleet run-local`: a job's recipe on this machine, with the platform's own rank entry
point (the same training loop, precision and AllReduce hooks, checkpoints and export) under
torchrun, before anything is uploaded. The run folder is laid out as a node agent lays it
out, so a recipe that runs here meets the same contract on the fleet; only the agent's
part (the database, the store, the sandbox) is left out, and the output is read back here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ampfleet.core.settings import get_settings
from ampfleet.core.spec import JobSpec
from ampfleet.workers.hardware_precision import script_hardware
from ampfleet.workers.launch import RECIPE_RANK, SCRIPT_RANK, rank_environment, torchrun_args
from ampfleet.workers.node import detect_capacity
from ampfleet.workers.rundir import LineTail, RecordReader, RunDir

LOCAL_JOB_ID = "local"
LOCAL_NODE = "local"
"""The node a local run's ranks name as theirs."""
PROCESS_GROUP_TIMEOUT_S = 120
POLL_S = 0.2


@dataclass
class LocalOutcome:
    returncode: int
    run_dir: RunDir
    metrics: dict[str, float] = field(default_factory=dict)
    """The last value of each series rank 0 reported."""
    steps: int = 0
    failures: list[dict[str, Any]] = field(default_factory=list)

    @property
    def succeeded(self) -> bool:
        return self.returncode == 0 and not self.failures

    def outputs(self) -> list[Path]:
        folder = self.run_dir.output_dir
        return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else []

    def exported(self) -> list[Path]:
        folder = self.run_dir.export_dir
        return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else []


def prepare(
    spec: JobSpec,
    root: Path,
    *,
    code_dir: Path | None,
    inputs: Mapping[str, Path],
    steps: int | None,
) -> RunDir:
    """The run folder and job file of a one-node run of `spec` under `root`; `steps` caps
    the run (a quick try), and `inputs` are local paths for the spec's input names."""
    resolved = spec.model_dump(mode="json")
    if steps is not None and not spec.is_script:  # a script counts its own steps
        resolved["stop"] = {**resolved["stop"], "max_steps": steps, "epochs": None}
    run_dir = RunDir.for_attempt(root / "runs", LOCAL_JOB_ID, 1, 0)
    run_dir.path.mkdir(parents=True, exist_ok=True)
    job: dict[str, Any] = {
        "job_id": LOCAL_JOB_ID,
        "attempt": 1,
        "spec": resolved,
        "checkpoint_dir": str(root / "checkpoints"),
        "process_group_timeout_s": PROCESS_GROUP_TIMEOUT_S,
        "metrics_flush_s": POLL_S,
        "node": LOCAL_NODE,  # every rank is on this machine
        "inputs": {name: str(path.resolve()) for name, path in inputs.items()},
    }
    if spec.is_script:  # what its libraries are told (script_environment.py)
        capacity = detect_capacity(get_settings())
        job["hardware"] = script_hardware(
            resolved["precision"],
            accelerator=capacity.accelerator,
            native_bf16=capacity.native_bf16,
        )
    if code_dir is not None:
        job["code_dir"] = str(code_dir.resolve())
        # Not uploaded: the manifest of the model says where the code came from instead.
        resolved["code"] = {**resolved["code"], "bundle": f"local folder {code_dir.resolve()}"}
        resolved["code"]["sha256"] = "not uploaded"
    run_dir.job_file.write_text(json.dumps(job))
    return run_dir


def run(run_dir: RunDir, procs: int, on_line: Callable[[str], None]) -> LocalOutcome:
    """torchrun with `procs` ranks on this machine; rank 0's output goes to `on_line` as it
    comes. Ctrl-C stops the ranks (and propagates)."""
    code = json.loads(run_dir.job_file.read_text())["spec"].get("code") or {}
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        *torchrun_args(
            run_dir=str(run_dir.path),
            nnodes=1,
            procs_per_node=procs,
            rendezvous=None,
            rendezvous_id=LOCAL_JOB_ID,
            is_host=True,
            local_addr="127.0.0.1",
            logs_dir=str(run_dir.logs_dir),
            rank_entry=SCRIPT_RANK if code.get("command") else RECIPE_RANK,
        ),
    ]
    environment = {**rank_environment(os.environ, ranks_at_once=procs)}
    launcher_log = (run_dir.path / "launcher.log").open("ab")
    with launcher_log:
        process = subprocess.Popen(
            command, env=environment, stdout=launcher_log, stderr=subprocess.STDOUT
        )
        outcome = LocalOutcome(returncode=-1, run_dir=run_dir)
        records = RecordReader(run_dir.events_file)
        output = LineTail(run_dir.rank_log(0, "stdout"))
        try:
            while True:
                done = process.poll() is not None
                _read(records, output, outcome, on_line)
                if done:
                    break
                time.sleep(POLL_S)
        except BaseException:
            process.terminate()
            process.wait(timeout=30)
            raise
    outcome.returncode = process.returncode
    outcome.failures = run_dir.failures()
    return outcome


def _read(
    records: RecordReader, output: LineTail, outcome: LocalOutcome, on_line: Callable[[str], None]
) -> None:
    for line in output.read_lines():
        on_line(line.decode(errors="replace").rstrip("\n"))
    output.commit()
    for record in records.read_new():
        if record.get("kind") == "metrics":
            outcome.metrics.update({k: float(v) for k, v in record["values"].items()})
        elif record.get("kind") == "progress":
            outcome.steps = int(record["step"])
    records.commit()
