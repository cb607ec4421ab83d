"""How this node starts an attempt's ranks: torchrun, the local launcher (cold, or forked
from a warm one), and for bundled code the attempt's sandbox around either (its uid, limits,
network: containment.py), with the GPUs it gets.

A single-node attempt of a recipe (installed or bundled) starts without torchrun, from the
node's warm launcher where one is ready: for an installed recipe the worker's own
(warm_pool.py), for bundled code a warm sandbox (warm_sandbox.py). Every other attempt
starts under torchrun, which imports torch before it starts a rank: an attempt on several
nodes (torchrun's rendezvous meets them), a script (it may expect torchrun's environment)
and a job with its own code.requirements (its own interpreter). Each start says which way
it went, and why not warm, in its `start_phases` event.

Every launch is a process in a session of its own (the attempt's process group: a cancel
signals every rank), started on the supervisor's thread: PR_SET_PDEATHSIG is tied to the
thread that forks, so it must outlive the children.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import IO

from ampfleet.core.sandbox import bubblewrap_problem
from ampfleet.core.settings import Settings
from ampfleet.workers import egress
from ampfleet.workers.attempts import LaunchRequest, RunningAttempt
from ampfleet.workers.containment import Contained, UidPool, attempt_memory_mb
from ampfleet.workers.gpus import GpuPool, device_nodes
from ampfleet.workers.launch import (
    RECIPE_RANK,
    SCRIPT_RANK,
    launch_command,
    rank_environment,
    torchrun_args,
)
from ampfleet.workers.local_launcher import Launch
from ampfleet.workers.parent_death import PARENT_PID_VARIABLE
from ampfleet.workers.rundir import RecordReader
from ampfleet.workers.sandbox_mounts import mount_api_problem
from ampfleet.workers.start_phases import StartPath
from ampfleet.workers.telemetry import Nvml, RankTelemetry
from ampfleet.workers.warm_pool import WarmPool, hand_over, launcher_command, start_launcher
from ampfleet.workers.warm_sandbox import WarmSandboxes

log = logging.getLogger(__name__)
NOT_READY = "no warm {} was ready (one starts once no attempt on the node is starting)"


class AttemptLauncher:
    """Starts attempts on this node; holds what they share: sandbox uids, GPUs, the warm
    launcher and the warm sandbox."""

    def __init__(
        self,
        settings: Settings,
        rank_memory_limit_mb: int | None = None,
        gpus: int = 0,
        slot_memory_mb: int | None = None,
    ) -> None:
        """`gpus`: how many this node has; each attempt gets indices of its own.
        `slot_memory_mb`: one slot's share of the host's memory, for sandboxes' cgroups."""
        self.settings = settings
        self.slot_memory_mb = slot_memory_mb or rank_memory_limit_mb
        self.uids = UidPool(settings.sandbox_first_uid, settings.sandbox_uid_count)
        self.gpus = GpuPool(gpus) if gpus else None
        self.slots = gpus or settings.node_cpu_slots
        """The most ranks this node runs at once, as the scheduler places them."""
        self.rank_memory_limit_mb = rank_memory_limit_mb
        self.nvml = Nvml.open()
        self.warm = WarmPool(settings.data_dir.resolve() / "warm-launcher.log")
        self.sandboxes = WarmSandboxes(
            settings, self.uids, attempt_memory_mb(self.slot_memory_mb, 1)
        )
        self.runs_bundles = False
        """This node has run bundled code in the sandbox since it started (with
        AMPFLEET_WARM_SANDBOX=once_used, it keeps a warm sandbox from then on)."""

    def clear_stale_egress(self) -> None:
        """Egress rules of this node's uids left by a worker (or doctor) that died with an
        attempt: none is held now, so no rule of theirs stays to refuse the next attempt."""
        if egress.problem() is not None:
            return
        first, count = self.settings.sandbox_first_uid, self.settings.sandbox_uid_count
        if cleared := egress.clear_stale(first, count):
            log.info("cleared the stale egress rules of uids %s", cleared)

    def start(self, request: LaunchRequest) -> RunningAttempt:
        request.run_dir.logs_dir.mkdir(parents=True, exist_ok=True)
        launcher_log = (request.run_dir.logs_dir / "launcher.log").open("ab")
        gpus = self.gpus.take(request.procs_per_node) if self.gpus else None
        try:
            return self._start(request, launcher_log, gpus)
        except BaseException:
            if gpus and self.gpus:
                self.gpus.give_back(gpus)
            raise

    def _start(
        self, request: LaunchRequest, launcher_log: IO[bytes], gpus: tuple[int, ...] | None
    ) -> RunningAttempt:
        env = {
            **self.rank_environment(),
            **(_visible(gpus) if gpus else {}),
        }
        launched_at = time.time()
        contained: Contained | None = None
        if request.code_dir is not None and self.settings.sandbox == "bubblewrap":
            self.runs_bundles = True
            del env[PARENT_PID_VARIABLE]  # inside the sandbox's PID namespace it has no pid
            process, contained, path = self._start_sandboxed(request, env, launcher_log, gpus)
        else:
            process, path = self._start_unconfined(request, env, launcher_log)
        log.info("launched %s attempt %s (pid %s)", request.job_id, request.attempt, process.pid)
        telemetry = RankTelemetry(process.pid, self.settings.telemetry_interval_s, self.nvml)
        reader = RecordReader(request.run_dir.events_file)
        attempt = RunningAttempt(request, process, launcher_log, reader, telemetry, contained, gpus)
        attempt.feed.launched_at = launched_at
        attempt.feed.start_path = path
        return attempt

    def _start_unconfined(
        self, request: LaunchRequest, env: dict[str, str], launcher_log: IO[bytes]
    ) -> tuple[subprocess.Popen[bytes], StartPath]:
        """Ranks as the worker's user: installed recipes, or anything with no sandbox."""
        if (reason := self._needs_torchrun(request)) is not None:
            return _popen(self._torchrun(request), env, launcher_log), StartPath(why_cold=reason)
        launch = self._launch(request, env)
        warm = self.warm.take() if self.settings.rank_launcher == "warm" else None
        if warm is None:
            reason = (
                NOT_READY.format("launcher") if self.settings.rank_launcher == "warm" else _LOCAL
            )
            cold = start_launcher(launch, stdout=launcher_log, env=env)
            return cold, StartPath(why_cold=reason)
        hand_over(warm, launch)
        return warm, StartPath()

    def _start_sandboxed(
        self,
        request: LaunchRequest,
        env: dict[str, str],
        launcher_log: IO[bytes],
        gpus: tuple[int, ...] | None,
    ) -> tuple[subprocess.Popen[bytes], Contained, StartPath]:
        """Bundled code, in a sandbox of its own: the warm one where it may, else one made
        now around a cold start."""
        torchrun = self._needs_torchrun(request)
        reason = torchrun or self._why_not_warm_sandbox(gpus)
        if reason is None:
            warm = self.sandboxes.take()
            if warm is not None:
                environment = {**env, **warm.contained.environment(env)}
                launch = self._launch(request, environment, workdir=True)
                try:
                    warm.admit(
                        launch,
                        readable=self._readable(request),
                        writable=self._writable(request),
                        memory_mb=self._memory_mb(request),
                    )
                    return warm.process, warm.contained, StartPath(sandbox=True)
                except Exception as exc:  # its cold start follows: this one is never used
                    log.exception("the warm sandbox could not take %s", request.job_id)
                    warm.discard()
                    reason = f"the warm sandbox could not take it ({exc})"
            else:
                reason = NOT_READY.format("sandbox")
        contained = self._contain(request)
        env = {**env, **contained.environment(env)}
        process = None
        try:
            if torchrun is not None:
                command = self._sandboxed(self._torchrun(request), request, contained, gpus)
                process = _popen(command, env, launcher_log, contained)
            else:
                command = self._sandboxed(launcher_command(warm=False), request, contained, gpus)
                process = _popen(command, env, launcher_log, contained, piped=True)
                hand_over(process, self._launch(request, env, workdir=True))
        except BaseException:
            if process is not None:  # nothing of it outlives its uid and cgroups
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            contained.close()
            raise
        contained.launched()
        return process, contained, StartPath(sandbox=True, why_cold=reason)

    def _needs_torchrun(self, request: LaunchRequest) -> str | None:
        """Why the attempt starts under torchrun, if it does."""
        if self.settings.rank_launcher == "torchrun":
            return _TORCHRUN
        if request.nnodes > 1:
            return f"it runs on {request.nnodes} nodes, which torchrun's rendezvous meets"
        if request.script:
            return "a script starts under torchrun, as it may expect"
        if request.python is not None:
            return "it runs the interpreter of its own code.requirements"
        return None

    def _why_not_warm_sandbox(self, gpus: tuple[int, ...] | None) -> str | None:
        """Why bundled code that may start without torchrun cannot start in a warm sandbox."""
        if self.settings.rank_launcher != "warm":
            return _LOCAL
        if self.settings.warm_sandbox == "never":
            return "this node keeps no warm sandbox (AMPFLEET_WARM_SANDBOX=never)"
        if gpus is not None:
            return "its GPUs' device nodes are bound into its sandbox as the sandbox starts"
        return mount_api_problem()

    def _keeps_warm_sandbox(self) -> bool:
        wanted = self.settings.warm_sandbox == "always" or (
            self.settings.warm_sandbox == "once_used" and self.runs_bundles
        )
        return (
            wanted
            and self.settings.sandbox == "bubblewrap"
            and self.gpus is None
            and mount_api_problem() is None
            and bubblewrap_problem() is None
        )

    def _launch(
        self, request: LaunchRequest, env: dict[str, str], *, workdir: bool = False
    ) -> Launch:
        """A single-node attempt's launch, for a local launcher (warm or cold); `workdir`:
        its ranks run in the run folder, as in a sandbox (bubblewrap's --chdir)."""
        return Launch(
            run_dir=str(request.run_dir.path),
            procs=request.procs_per_node,
            entry=RECIPE_RANK,
            environment=env,
            memory_limit_mb=self.rank_memory_limit_mb,
            log=str(request.run_dir.logs_dir / "launcher.log"),
            workdir=str(request.run_dir.path) if workdir else None,
        )

    def _torchrun(self, request: LaunchRequest) -> list[str]:
        run_dir = request.run_dir
        args = torchrun_args(
            run_dir=str(run_dir.path),
            nnodes=request.nnodes,
            procs_per_node=request.procs_per_node,
            rendezvous=request.rendezvous,
            rendezvous_id=f"{request.job_id}-{request.attempt}",
            is_host=request.node_rank == 0,
            local_addr=self.settings.node_address,
            logs_dir=str(run_dir.logs_dir),
            rank_entry=SCRIPT_RANK if request.script else RECIPE_RANK,
        )
        return launch_command(
            args, memory_limit_mb=self.rank_memory_limit_mb, python=request.python
        )

    def rank_environment(self) -> dict[str, str]:
        """What a launcher and its ranks get from this worker; outside a sandbox the
        launcher can check that its parent is this process. Its ranks share the node's
        cores with those of every other attempt its slots can hold."""
        return {
            **rank_environment(
                os.environ, ranks_at_once=self.slots, node_address=self.settings.node_address
            ),
            PARENT_PID_VARIABLE: str(os.getpid()),
        }

    def fill_warm_pool(self, *, starting: bool) -> None:
        """A warm launcher for the next attempt, and a warm sandbox where this node runs
        bundled code, unless an attempt here is still starting or waits to be launched
        (`starting`: their imports would compete with its)."""
        if self.settings.rank_launcher != "warm" or starting:
            return
        self.warm.fill(self.rank_environment())
        if self._keeps_warm_sandbox():
            env = self.rank_environment()
            del env[PARENT_PID_VARIABLE]
            self.sandboxes.fill(env)

    def _memory_mb(self, request: LaunchRequest) -> int | None:
        return attempt_memory_mb(self.slot_memory_mb, request.procs_per_node)

    def _writable(self, request: LaunchRequest) -> list[Path]:
        return [request.run_dir.path, request.checkpoint_dir]

    def _readable(self, request: LaunchRequest) -> list[Path]:
        # A requirements environment, read-only: <env>/bin/python is its interpreter.
        extra = [Path(request.python).parent.parent] if request.python else []
        code = [Path(request.code_dir)] if request.code_dir else []
        return [*code, *map(Path, request.input_paths), *extra]

    def _contain(self, request: LaunchRequest) -> Contained:
        return Contained.prepare(
            self.settings,
            self.uids,
            name=f"{request.job_id}-{request.attempt}-{request.node_rank}",
            nnodes=request.nnodes,
            memory_mb=self._memory_mb(request),
            writable=self._writable(request),
            peers=request.peers,
        )

    def _sandboxed(
        self,
        command: list[str],
        request: LaunchRequest,
        contained: Contained,
        gpus: tuple[int, ...] | None,
    ) -> list[str]:
        return contained.command(
            command,
            self.settings,
            writable=self._writable(request),
            readable=self._readable(request),
            devices=device_nodes(gpus),
        )

    def ended(self, attempt: RunningAttempt) -> None:
        """Its ranks have exited and its end is recorded: its GPUs are free again."""
        if attempt.gpus and self.gpus:
            self.gpus.give_back(attempt.gpus)

    def close(self) -> None:
        self.warm.close()
        self.sandboxes.close()


_TORCHRUN = "this node starts every attempt under torchrun (AMPFLEET_RANK_LAUNCHER=torchrun)"
_LOCAL = "this node starts ranks cold (AMPFLEET_RANK_LAUNCHER=local)"


def _popen(
    command: list[str],
    env: dict[str, str],
    launcher_log: IO[bytes],
    contained: Contained | None = None,
    *,
    piped: bool = False,
) -> subprocess.Popen[bytes]:
    """A launch in a session of its own (its process group: cancel signals every rank);
    `piped`: its launch comes on stdin (a local launcher's)."""
    return subprocess.Popen(
        command,
        # bwrap would die of the preemption signal; the launcher and ranks set their own.
        preexec_fn=contained.enter if contained else None,  # noqa: PLW1509
        pass_fds=contained.pass_fds if contained else (),
        stdout=launcher_log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.PIPE if piped else subprocess.DEVNULL,
        start_new_session=True,
        env=env,
    )


def _visible(gpus: tuple[int, ...]) -> dict[str, str]:
    """The attempt's GPUs for CUDA, numbered as the driver's device nodes are (PCI order),
    so the indices mean the same devices as the /dev/nvidia<N> the sandbox binds."""
    return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus)), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
