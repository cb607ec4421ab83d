"""Script mode's rank process (training/script.py) under the platform's own launcher and
torchrun, without the rest of the platform: a plain DDP script runs unchanged on 2 gloo
ranks, every record rank 0 writes passes the agent's schema, its outputs are listed with a
manifest; the environment contract holds; a failing script reports its status and stderr;
a preempted one gets SIGTERM, its files are carried to the next attempt."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from ampfleet.core.spec import JobSpec
from ampfleet.workers import local_run
from ampfleet.workers.hardware_precision import cpu_supports_bf16
from ampfleet.workers.launch import SCRIPT_RANK, launch_command, rank_environment, torchrun_args
from ampfleet.workers.records import Rejected, parse
from ampfleet.workers.rundir import RunDir
from tests.support.scripts import DDP_TRAIN, FAILING, LONG_RUNNING

BUNDLE = "bnd_" + "0" * 26

ENV_DUMP = b"""
import json, os
names = [n for n in os.environ if n.startswith("AMPFLEET_")] + [
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"]
seen = {n: os.environ.get(n) for n in names}
seen["cwd"] = os.getcwd()
out = os.path.join(os.environ["AMPFLEET_OUTPUT_DIR"], "env-%s.json" % os.environ["RANK"])
json.dump(seen, open(out, "w"))
"""


def script_spec(command: list[str], **fields: Any) -> JobSpec:
    return JobSpec.model_validate({"code": {"bundle": BUNDLE, "command": command}, **fields})


def records_of(run_dir: RunDir) -> list[dict[str, Any]]:
    lines = run_dir.events_file.read_bytes().splitlines()
    parsed = [parse(line, number) for number, line in enumerate(lines, 1)]
    rejected = [p for p in parsed if isinstance(p, Rejected)]
    assert rejected == [], rejected
    return [p for p in parsed if not isinstance(p, Rejected)]


def run_locally(
    tmp_path: Path, files: dict[str, bytes], spec: JobSpec, procs: int = 1
) -> tuple[local_run.LocalOutcome, list[str]]:
    code = tmp_path / "code"
    code.mkdir()
    for name, data in files.items():
        (code / name).write_bytes(data)
    run_dir = local_run.prepare(
        spec, tmp_path, code_dir=code, inputs={"train-set": code}, steps=None
    )
    printed: list[str] = []
    return local_run.run(run_dir, procs, printed.append), printed


def test_a_plain_ddp_script_runs_unchanged_on_two_ranks(tmp_path: Path) -> None:
    spec = script_spec(["python", "train.py", "--epochs", "2"], hyperparameters={"lr": 0.05})
    outcome, printed = run_locally(tmp_path, {"train.py": DDP_TRAIN}, spec, procs=2)
    assert outcome.succeeded, (outcome.failures, printed)
    assert "hello from the plain script, world of 2" in printed
    records = records_of(outcome.run_dir)
    assert records[0]["kind"] == "started"
    assert records[0]["world_size"] == 2
    assert records[-1]["kind"] == "finished"
    progress = [r for r in records if r["kind"] == "progress"]
    assert progress[-1] == {**progress[-1], "step": 16, "total_steps": 16}
    assert any(r["kind"] == "metrics" and "loss" in r["values"] for r in records)
    assert any(r["kind"] == "usage" for r in records)
    artifacts = {r["name"]: r for r in records if r["kind"] == "artifact"}
    assert set(artifacts) == {"outputs/model.pt", "manifest.json"}
    state = torch.load(artifacts["outputs/model.pt"]["paths"][0], weights_only=True)
    assert set(state) == {"weight", "bias"}
    manifest = json.loads(Path(artifacts["manifest.json"]["paths"][0]).read_text())
    assert manifest["command"] == ["python", "train.py", "--epochs", "2"]
    assert manifest["bundle"]["sha256"] == "not uploaded"  # a local run's
    assert "outputs/model.pt" in manifest["outputs"]
    hyperparameters = json.loads(outcome.run_dir.hyperparameters_file.read_text())
    assert hyperparameters == {"lr": 0.05}


def test_the_script_sees_the_environment_contract(tmp_path: Path) -> None:
    spec = script_spec(["python", "dump.py"], hyperparameters={"width": 3})
    outcome, _ = run_locally(tmp_path, {"dump.py": ENV_DUMP}, spec, procs=2)
    assert outcome.succeeded, outcome.failures
    run_dir = outcome.run_dir
    for rank in (0, 1):
        seen = json.loads((run_dir.output_dir / f"env-{rank}.json").read_text())
        assert seen["RANK"] == str(rank)
        assert seen["WORLD_SIZE"] == seen["LOCAL_WORLD_SIZE"] == "2"
        assert seen["MASTER_ADDR"]
        assert seen["MASTER_PORT"]
        assert seen["AMPFLEET_RUN_DIR"] == str(run_dir.path)
        assert seen["AMPFLEET_OUTPUT_DIR"] == str(run_dir.output_dir)
        assert seen["AMPFLEET_CHECKPOINT_DIR"] == str(tmp_path / "checkpoints")
        assert json.loads(seen["AMPFLEET_HYPERPARAMETERS"]) == {"width": 3}
        code = str((tmp_path / "code").resolve())
        assert json.loads(seen["AMPFLEET_INPUTS"]) == {"train-set": code}
        assert seen["AMPFLEET_INPUT_TRAIN_SET"] == code
        assert seen["AMPFLEET_JOB_ID"] == local_run.LOCAL_JOB_ID
        assert seen["AMPFLEET_ATTEMPT"] == "1"
        assert seen["cwd"] == code
        assert "TRAINING_PARENT_PID" not in seen


def test_a_failing_script_reports_its_status_and_stderr(tmp_path: Path) -> None:
    outcome, _ = run_locally(tmp_path, {"fail.py": FAILING}, script_spec(["python", "fail.py"]))
    assert not outcome.succeeded
    (failure,) = outcome.failures
    assert failure["type"] == "ScriptFailed"
    assert "exited with status 3" in failure["message"]
    assert "the learning rate is not a number" in failure["message"]
    assert "finished" not in [r["kind"] for r in records_of(outcome.run_dir)]


def test_a_missing_script_fails_in_words(tmp_path: Path) -> None:
    spec = script_spec(["python", "nothere.py"])
    outcome, _ = run_locally(tmp_path, {"train.py": b""}, spec)
    (failure,) = outcome.failures
    assert "nothere.py, which the bundle does not have" in failure["message"]


def launch_attempt(root: Path, attempt: int) -> tuple[subprocess.Popen[bytes], RunDir]:
    """One attempt of the long-running script, launched as the supervisor launches one."""
    code = root / "code"
    code.mkdir(exist_ok=True)
    (code / "count.py").write_bytes(LONG_RUNNING)
    spec = script_spec(["python", "count.py"]).model_dump(mode="json")
    spec["code"]["sha256"] = "0" * 64
    run_dir = RunDir.for_attempt(root / "runs", "job", attempt, 0)
    run_dir.path.mkdir(parents=True)
    job = {
        "job_id": "job",
        "attempt": attempt,
        "spec": spec,
        "checkpoint_dir": str(root / "checkpoints"),
        "metrics_flush_s": 0.1,
        "stop_grace_s": 20,
        "code_dir": str(code),
        "inputs": {},
    }
    run_dir.job_file.write_text(json.dumps(job))
    args = torchrun_args(
        run_dir=str(run_dir.path),
        nnodes=1,
        procs_per_node=1,
        rendezvous=None,
        rendezvous_id="job",
        is_host=True,
        local_addr="127.0.0.1",
        logs_dir=str(run_dir.logs_dir),
        rank_entry=SCRIPT_RANK,
    )
    env = {**rank_environment(os.environ, ranks_at_once=1), "TRAINING_PARENT_PID": ""}
    process = subprocess.Popen(
        launch_command(args, memory_limit_mb=None),
        env=env,
        stdout=(root / f"launcher-{attempt}.log").open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return process, run_dir


def wait_for(predicate: Any, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def printed(run_dir: RunDir) -> str:
    path = run_dir.rank_log(0, "stdout")
    return path.read_text() if path.exists() else ""


def test_a_preempted_script_gets_sigterm_and_its_files_carry_to_the_next_attempt(
    tmp_path: Path,
) -> None:
    process, run_dir = launch_attempt(tmp_path, 1)
    try:
        wait_for(lambda: "step=5" in printed(run_dir), "the script to count")
        os.killpg(process.pid, signal.SIGUSR1)  # as the supervisor preempts
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert "stopped at step" in printed(run_dir)
    records = records_of(run_dir)
    (preempted,) = [r for r in records if r["kind"] == "preempted"]
    (carried,) = [r for r in records if r["kind"] == "artifact"]
    assert carried["artifact_kind"] == "checkpoint"
    assert carried["step"] == preempted["step"] >= 5
    assert {Path(p).name for p in carried["paths"]} == {"state.json", "_script_snapshot.json"}
    assert not (tmp_path / "checkpoints" / "state.json").exists()  # moved, not copied

    process, run_dir = launch_attempt(tmp_path, 2)
    try:
        wait_for(lambda: "step=" in printed(run_dir), "the next attempt to count")
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=60)
    saved = json.loads(Path(carried["paths"][0]).read_text())["step"]
    assert f"starting from step {saved}" in printed(run_dir)
    started = records_of(run_dir)[0]
    assert started["kind"] == "started"
    assert started["resumed_from_step"] == preempted["step"]


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (["python", "train.py", "-x"], ["PY", "train.py", "-x"]),
        (["python3", "-m", "pkg.main"], ["PY", "-m", "pkg.main"]),
        (["train.py", "--a"], ["PY", "/code/train.py", "--a"]),
        (["bin/run.sh"], ["/code/bin/run.sh"]),
        (["bash", "run.sh"], ["bash", "run.sh"]),
    ],
)
def test_the_program_a_command_runs(command: list[str], expected: list[str]) -> None:
    from ampfleet.workers.training.script import program

    assert program(command, Path("/code"), "PY") == expected


def test_the_script_rank_imports_no_torch() -> None:
    probe = "import sys, ampfleet.workers.training.script; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


ASKS_THE_LIBRARIES = b"""
import json, os
from accelerate import Accelerator

accelerator = Accelerator()
seen = {
    "accelerate": str(accelerator.mixed_precision),
    "accelerate_device": accelerator.device.type,
    "processes": accelerator.num_processes,
    "precision": os.environ.get("AMPFLEET_PRECISION"),
}
index = accelerator.process_index
from transformers import TrainingArguments  # it resets Accelerate's state: asked after

output = os.environ["AMPFLEET_OUTPUT_DIR"]
seen["trainer"] = TrainingArguments(output_dir=output, report_to=[]).mixed_precision
with open(os.path.join(output, "seen-%d.json" % index), "w") as out:
    json.dump(seen, out)
"""


@pytest.mark.parametrize("precision", ["bf16", "fp32", "auto"])
def test_hf_accelerate_and_the_trainer_take_the_jobs_precision(
    tmp_path: Path, precision: str
) -> None:
    pytest.importorskip("accelerate", reason="the dev extra installs HF Accelerate")
    spec = script_spec(["python", "ask.py"], precision=precision)
    outcome, printed = run_locally(tmp_path, {"ask.py": ASKS_THE_LIBRARIES}, spec, procs=2)
    assert outcome.succeeded, (outcome.failures, printed)
    expected = {"bf16": "bf16", "fp32": "no"}.get(precision)
    if expected is None:  # auto: what this CPU computes natively
        expected = "bf16" if cpu_supports_bf16() else "no"
    for rank in (0, 1):
        seen = json.loads((outcome.run_dir.output_dir / f"seen-{rank}.json").read_text())
        assert (seen["accelerate"], seen["trainer"]) == (expected, expected), seen
        assert seen["accelerate_device"] == "cpu"
        assert seen["processes"] == 2  # it joined torchrun's world, as the platform made it
        assert seen["precision"] == ("fp32" if expected == "no" else expected)
