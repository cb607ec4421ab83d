"""One rank of a script job (`code.command`), launched by torchrun where a recipe's rank would
be: `python -m ampfleet.workers.training.script RUN_DIR`.

It runs the user's command as its child, from the bundle's folder, with torchrun's
environment and the platform's (script_environment.py), its stdout and stderr going straight
into the rank's own log files. Rank 0 writes the records the node agent needs: `started`
before the child starts, then `progress` (and the metrics beside it) read off the script's
printed lines (script_progress.py) until the script adopts `ampfleet.train` (whose session
marks that in the run folder, and writes the records from then on: never two writers at
once), and once the child exited 0 its outputs, a manifest and `finished`.

Preemption (SIGUSR1 from the launcher) is SIGTERM to the script, then SIGKILL a grace later;
its own files in the checkpoint folder are then carried to the next attempt
(script_checkpoints.py). SIGTERM (a cancel, a stop) goes on to the script as it is. A script
that exits non-zero fails the job with its exit status and the tail of its stderr; one
killed by a signal (the OOM killer) is a lost rank, which the job's retry policy restarts.

Standard library only (no torch): the script imports its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from ampfleet.core.accounting import AttemptClock
from ampfleet.core.artifact_names import MANIFEST, checkpoint_name
from ampfleet.core.spec import PYTHON_PROGRAMS, command_script, describe_command
from ampfleet.workers.checkpoint_folders import latest_step
from ampfleet.workers.heartbeat import Heartbeat, heartbeat_file
from ampfleet.workers.parent_death import (
    PARENT_PID_VARIABLE,
    child_dies_with_parent,
    die_with_parent,
)
from ampfleet.workers.rank_output import capture_output
from ampfleet.workers.records import SCRIPT_OWNED
from ampfleet.workers.rundir import RecordWriter, RunDir
from ampfleet.workers.script_environment import script_environment
from ampfleet.workers.training import script_checkpoints
from ampfleet.workers.training.outputs import (
    MANIFEST_FORMAT,
    atomic_write,
    collect_outputs,
    described,
    package_versions,
    recipe_label,
    write_artifact_records,
)
from ampfleet.workers.training.script_progress import ProgressReader

POLL_S = 0.2
BEAT_EVERY_S = 2.0
MAX_READ_BYTES = 1 << 20
STDERR_TAIL_LINES = 20
STDERR_TAIL_BYTES = 1500
DEFAULT_STOP_GRACE_S = 30.0
"""A preempted script's grace where the job file names none (a local run)."""


class ScriptMissingError(FileNotFoundError):
    """The command names a script the bundle does not have."""


def script_grace_s(stop_grace_s: float) -> float:
    """The script's share of the preemption grace: the rest is this process's, to carry its
    files and write its records before the agent's SIGKILL."""
    return max(1.0, stop_grace_s - min(10.0, stop_grace_s / 4))


def program(command: list[str], code_dir: Path, interpreter: str) -> list[str]:
    """The argv to execute: `python` (or `python3`) is the job's interpreter, a `.py` first
    argument runs under it, a relative path is the bundle's file, any other name is looked
    up on PATH (the job's interpreter's folder first)."""
    first, rest = command[0], command[1:]
    if first in PYTHON_PROGRAMS:
        return [interpreter, *rest]
    if first.endswith(".py"):
        return [interpreter, str(code_dir / first), *rest]
    if "/" in first:
        return [str(code_dir / first), *rest]
    return command


class ScriptRank:
    def __init__(self, run_dir: RunDir, job: dict[str, Any], rank: int, world_size: int) -> None:
        self.run_dir, self.job, self.rank, self.world_size = run_dir, job, rank, world_size
        self.command: list[str] = job["spec"]["code"]["command"]
        self.code_dir = Path(job["code_dir"])
        self.checkpoint_dir = Path(job["checkpoint_dir"])
        self.child: subprocess.Popen[bytes] | None = None
        self.preempting = False
        self.stopping = False
        self.kill_at: float | None = None
        self.writer: RecordWriter | None = None
        self.progress = ProgressReader()
        self.clock = AttemptClock(resumed_from=0)
        self.metrics: dict[str, float] = {}
        self._stdout_offset = 0
        self._beat_at = 0.0
        self._heartbeat: Heartbeat | None = None

    # -- signals (installed before anything else: the agent may send them early) ---------

    def preempt(self, _signum: int, _frame: FrameType | None) -> None:
        if self.preempting:
            return
        self.preempting = True
        grace = script_grace_s(float(self.job.get("stop_grace_s") or DEFAULT_STOP_GRACE_S))
        self.kill_at = time.monotonic() + grace
        self._signal_child(signal.SIGTERM)

    def stop(self, signum: int, _frame: FrameType | None) -> None:
        self.stopping = True
        self._signal_child(signal.Signals(signum))

    def _signal_child(self, sig: signal.Signals) -> None:
        if self.child is not None and self.child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.child.send_signal(sig)

    # -- the run ---------------------------------------------------------------------------

    def run(self) -> int:
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)  # the agent's, on a fleet
        carried = script_checkpoints.put_back(self.checkpoint_dir, int(self.job["attempt"]))
        # Where the attempt resumes: the script's own files carried over, or the latest
        # checkpoint its ampfleet.train session saved (it restores that one); the agent
        # keeps the earlier attempts' points up to there.
        resumed = max(carried or 0, latest_step(self.checkpoint_dir))
        self.progress = ProgressReader(resumed)
        self.clock = AttemptClock(resumed_from=resumed)
        self.run_dir.output_dir.mkdir(parents=True, exist_ok=True)
        self._write_hyperparameters()
        argv = self._checked_argv()
        if self.rank == 0:
            self.writer = RecordWriter(self.run_dir.events_file, float(self.job["metrics_flush_s"]))
            self._started(self.writer, resumed)
        self._heartbeat = Heartbeat(heartbeat_file(self.run_dir.path, self.rank))
        try:
            code = self._run_child(argv) if not (self.preempting or self.stopping) else None
            return self._ended(code)
        finally:
            self._heartbeat.close()
            if self.writer is not None:
                self.writer.close()

    def _checked_argv(self) -> list[str]:
        script = command_script(self.command)
        relative = script is not None and not script.startswith("/")
        if relative and not (self.code_dir / str(script)).is_file():
            raise ScriptMissingError(
                f"the command runs {script}, which the bundle does not have (it is run "
                "from the bundle's top folder)"
            )
        return program(self.command, self.code_dir, sys.executable)

    def _write_hyperparameters(self) -> None:
        """Every rank writes the same bytes, each renamed into place whole."""
        target = self.run_dir.hyperparameters_file
        partial = target.with_name(f".{target.name}.{os.getpid()}")
        partial.write_text(json.dumps(self.job["spec"].get("hyperparameters") or {}))
        partial.replace(target)

    def _started(self, writer: RecordWriter, resumed: int) -> None:
        writer.write(
            "started",
            precision=SCRIPT_OWNED,
            allreduce_dtype=SCRIPT_OWNED,
            total_steps=None,
            resumed_from_step=resumed,
            world_size=self.world_size,
            backend=SCRIPT_OWNED,
        )
        writer.write(
            "event",
            reason="script_mode",
            message=f"running {describe_command(self.command)} on {self.world_size} ranks: the "
            "script owns its precision, AllReduce and optimizer, and the platform reports its "
            "progress from its printed lines (step N/T, step=N) until it adopts ampfleet.train",
        )
        writer.flush()

    def _run_child(self, argv: list[str]) -> int:
        run_dir = self.run_dir
        env = script_environment(
            {k: v for k, v in os.environ.items() if k != PARENT_PID_VARIABLE},
            job=self.job,
            run_dir=run_dir.path,
            output_dir=run_dir.output_dir,
            interpreter=sys.executable,
        )
        stdout = run_dir.rank_log(self.rank, "stdout")
        self._stdout_offset = stdout.stat().st_size if stdout.exists() else 0
        sys.stdout.flush()
        sys.stderr.flush()
        me = os.getpid()
        self.child = subprocess.Popen(  # its stdout and stderr: this rank's log files
            argv,
            cwd=self.code_dir,
            env=env,
            stdin=subprocess.DEVNULL,
            preexec_fn=lambda: child_dies_with_parent(me),  # noqa: PLW1509 - prctl only
        )
        while True:
            try:
                code = self.child.wait(timeout=POLL_S)
                break
            except subprocess.TimeoutExpired:
                pass
            self._report()
            self._beat()
            if self.kill_at is not None and time.monotonic() >= self.kill_at:
                self._signal_child(signal.SIGKILL)
                self.kill_at = None
        self._report()
        return code

    # -- while it runs ---------------------------------------------------------------------

    def _session_adopted(self) -> bool:
        return self.run_dir.session_marker.exists()

    def _report(self) -> None:
        """Rank 0: progress from the script's new lines, unless its session reports."""
        if self.writer is None:
            return
        lines = self._new_stdout_lines()
        if not lines or self._session_adopted():
            return
        for report in self.progress.feed(lines):
            if self.clock.first_step_at is None:
                self.clock.first_step_at = time.time()
            self.clock.step_s = time.time() - self.clock.first_step_at
            if report.metrics:
                self.metrics.update(report.metrics)
                self.writer.write("metrics", step=report.step, values=report.metrics)
            self.writer.write("progress", step=report.step, total_steps=self.progress.total_steps)
            self.writer.write("usage", **self.clock.record(report.step))
        self.writer.flush()

    def _new_stdout_lines(self) -> list[str]:
        path = self.run_dir.rank_log(self.rank, "stdout")
        try:
            with path.open("rb") as file:
                file.seek(self._stdout_offset)
                data = file.read(MAX_READ_BYTES)
        except OSError:
            return []
        end = data.rfind(b"\n") + 1
        if end == 0 and len(data) == MAX_READ_BYTES:
            end = len(data)
        self._stdout_offset += end
        return data[:end].decode(errors="replace").splitlines()

    def _beat(self) -> None:
        """Alive while the script runs (its phases are its own); once it adopted
        `ampfleet.train`, its session beats per step instead."""
        now = time.monotonic()
        if self._heartbeat is None or now - self._beat_at < BEAT_EVERY_S:
            return
        self._beat_at = now
        if not self._session_adopted():
            self._heartbeat.beat(self.progress.step, "script")

    # -- once it exited --------------------------------------------------------------------

    def _ended(self, code: int | None) -> int:
        if self.preempting:
            self._carry_files(preempted=True)
            return 0
        if self.stopping or code is None:
            return 128 + signal.SIGTERM
        if code == 0:
            if self.writer is not None and not self._finished_by_session():
                self._finish(self.writer)
            return 0
        if code < 0:  # killed (the OOM killer, a SIGKILL): a lost rank, restarted
            self._carry_files(preempted=False)
            return 128 - code
        tail = self._stderr_tail()
        self.run_dir.write_failure(
            self.rank,
            "ScriptFailed",
            f"the command exited with status {code}" + (f": {tail}" if tail else ""),
            tail,
        )
        return code

    def _carry_files(self, *, preempted: bool) -> None:
        if self.writer is None or self._session_adopted():
            return
        step = self.progress.step
        files = script_checkpoints.snapshot(self.checkpoint_dir, step)
        if files:
            self.clock.saved(step)
            self.writer.write(
                "artifact",
                artifact_kind="checkpoint",
                name=checkpoint_name(step),
                paths=[str(path) for path in files],
                step=step,
                details={"script": True},
            )
            if preempted:
                self.writer.write("preempted", step=step)
        self.writer.write("usage", **self.clock.record(step))
        self.writer.flush()

    def _finished_by_session(self) -> bool:
        """Whether the script's `ampfleet.train` session wrote `finished` itself."""
        if not self._session_adopted() or self.writer is None:
            return False
        self.writer.flush()
        try:
            lines = self.run_dir.events_file.read_text(errors="replace").splitlines()
        except OSError:
            return False
        return any('"finished"' in line and _kind(line) == "finished" for line in lines)

    def _finish(self, writer: RecordWriter) -> None:
        """The outputs, a manifest that says what made them, then `finished`."""
        outputs, left_out = collect_outputs(self.run_dir.output_dir)
        self.run_dir.export_dir.mkdir(parents=True, exist_ok=True)
        manifest_path = self.run_dir.export_dir / MANIFEST
        manifest = self._manifest(outputs, left_out)
        atomic_write(manifest_path, lambda tmp: tmp.write_text(json.dumps(manifest, indent=2)))
        made = described(manifest_path, "model", MANIFEST, {"format": MANIFEST_FORMAT})
        step = self.progress.step if self.progress.reported_any else None
        write_artifact_records(writer, [*outputs, made], step)
        writer.write("finished")

    def _manifest(self, outputs: list[Any], left_out: list[str]) -> dict[str, Any]:
        spec = self.job["spec"]
        code = spec["code"]
        return {
            "format": MANIFEST_FORMAT,
            "job_id": self.job["job_id"],
            "attempt": self.job["attempt"],
            "created_at": datetime.now(UTC).isoformat(),
            "recipe": recipe_label(spec),
            "command": self.command,
            "bundle": {"id": code["bundle"], "sha256": code.get("sha256")},
            "hyperparameters": spec.get("hyperparameters") or {},
            "spec": spec,
            "init_from": spec.get("init_from"),
            "precision": {"requested": spec.get("precision"), "effective": SCRIPT_OWNED},
            "allreduce_dtype": {
                "requested": spec.get("allreduce_dtype"),
                "effective": SCRIPT_OWNED,
            },
            "world_size": self.world_size,
            "last_step": self.progress.step if self.progress.reported_any else None,
            "metrics": self.metrics,
            "outputs": {f.name: {"size": f.size, "sha256": f.sha256} for f in outputs},
            "outputs_left_out": left_out,
            "versions": package_versions("ampfleet", "torch"),
        }

    def _stderr_tail(self) -> str:
        """The script's last lines on stderr (its traceback, as a rule)."""
        path = self.run_dir.rank_log(self.rank, "stderr")
        try:
            with path.open("rb") as file:
                file.seek(max(0, path.stat().st_size - 16 * STDERR_TAIL_BYTES))
                text = file.read().decode(errors="replace")
        except OSError:
            return ""
        lines = [line for line in text.splitlines() if line.strip()][-STDERR_TAIL_LINES:]
        return "\n".join(lines)[-STDERR_TAIL_BYTES:]


def _kind(line: str) -> str | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record.get("kind") if isinstance(record, dict) else None


def main(argv: list[str]) -> int:
    die_with_parent()
    run_dir = RunDir(Path(argv[1]))
    job = json.loads(run_dir.job_file.read_text())
    rank = int(os.environ["RANK"])
    script = ScriptRank(run_dir, job, rank, int(os.environ["WORLD_SIZE"]))
    signal.signal(signal.SIGUSR1, script.preempt)
    signal.signal(signal.SIGTERM, script.stop)
    signal.signal(signal.SIGINT, script.stop)
    # The agent asks a hung attempt's ranks for their stacks; a plain script has none of
    # the platform's to give, and must not die of the asking.
    # (A handler, not SIG_IGN, which the script would inherit.)
    signal.signal(signal.SIGUSR2, lambda _signum, _frame: None)
    capture_output(run_dir, rank)
    try:
        return script.run()
    except Exception as exc:
        run_dir.write_failure(
            rank, type(exc).__name__, str(exc), "".join(traceback.format_exception(exc)[-3:])
        )
        traceback.print_exc()
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
