"""How this node starts an attempt's ranks: torchrun, the local launcher (cold or forked from
the warm one), and for bundled code the attempt's sandbox around either (its uid, limits,
network: containment.py), with the GPUs it gets.

Every launch is a process in a session of its own (the attempt's process group: a cancel
signals every rank), started on the supervisor's thread: PR_SET_PDEATHSIG is tied to the
thread that forks, so it must outlive the children.
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
from pathlib import Path
from typing import IO

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
from ampfleet.workers.telemetry import Nvml, RankTelemetry
from ampfleet.workers.warm_pool import WarmPool, hand_over, start_launcher

log = logging.getLogger(__name__)


class AttemptLauncher:
    """Starts attempts on this node; holds what they share: sandbox uids, GPUs, the warm
    launcher."""

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
        self.rank_memory_limit_mb = rank_memory_limit_mb
        self.nvml = Nvml.open()
        self.warm = WarmPool(settings.data_dir.resolve() / "warm-launcher.log")

    def clear_stale_egress(self) -> None:
        """Egress rules of this node's uids left by a worker (or doctor) that died with an
        attempt: none is held now, so no rule of theirs stays to refuse the next attempt."""
        if egress.problem() is not None:
            return
        first, count = self.settings.sandbox_first_uid, self.settings.sandbox_uid_count
        if cleared := egress.clear_stale(first, count):
            log.info("cleared the stale egress rules of uids %s", cleared)

    def start(self, request: LaunchRequest) -> RunningAttempt:
        run_dir = request.run_dir
        run_dir.logs_dir.mkdir(parents=True, exist_ok=True)
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
        launcher_log = (run_dir.logs_dir / "launcher.log").open("ab")
        command = launch_command(
            args, memory_limit_mb=self.rank_memory_limit_mb, python=request.python
        )
        contained_code = request.code_dir is not None and self.settings.sandbox == "bubblewrap"
        gpus = self.gpus.take(request.procs_per_node) if self.gpus else None
        try:
            return self._start(request, command, launcher_log, contained_code, gpus)
        except BaseException:
            if gpus and self.gpus:
                self.gpus.give_back(gpus)
            raise

    def _start(
        self,
        request: LaunchRequest,
        command: list[str],
        launcher_log: IO[bytes],
        contained_code: bool,
        gpus: tuple[int, ...] | None,
    ) -> RunningAttempt:
        run_dir = request.run_dir
        contained = self._contain(request) if contained_code else None
        env = {
            **self.rank_environment(request.procs_per_node),
            **(_visible(gpus) if gpus else {}),
            **(contained.environment() if contained else {}),
        }
        if contained is not None:  # inside the sandbox's PID namespace the worker has no pid
            del env[PARENT_PID_VARIABLE]
        launched_at = time.time()
        try:
            if contained is None and self._launches_locally(request):
                process = self._launch_locally(request, env, launcher_log)
            else:
                process = subprocess.Popen(
                    command
                    if contained is None
                    else self._sandboxed(command, request, contained, gpus),
                    # bwrap would die of the preemption signal; the launcher and ranks set
                    # their own.
                    preexec_fn=contained.enter if contained else None,  # noqa: PLW1509
                    pass_fds=contained.pass_fds if contained else (),
                    stdout=launcher_log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,  # its own process group: cancel signals every rank
                    env=env,
                )
        except BaseException:
            if contained is not None:
                contained.close()
            raise
        if contained is not None:
            contained.launched()
        log.info("launched %s attempt %s (pid %s)", request.job_id, request.attempt, process.pid)
        telemetry = RankTelemetry(process.pid, self.settings.telemetry_interval_s, self.nvml)
        reader = RecordReader(run_dir.events_file)
        attempt = RunningAttempt(request, process, launcher_log, reader, telemetry, contained, gpus)
        attempt.feed.launched_at = launched_at
        return attempt

    def rank_environment(self, procs_per_node: int) -> dict[str, str]:
        """What a launcher and its ranks get from this worker; outside a sandbox the
        launcher can check that its parent is this process."""
        return {
            **rank_environment(
                os.environ, procs_per_node=procs_per_node, node_address=self.settings.node_address
            ),
            PARENT_PID_VARIABLE: str(os.getpid()),
        }

    def _launches_locally(self, request: LaunchRequest) -> bool:
        """Single-node attempts of installed recipes start without torchrun (warm_pool.py
        says why only those)."""
        return (
            self.settings.rank_launcher != "torchrun"
            and request.nnodes == 1
            and request.code_dir is None
            and request.python is None
            and not request.script
        )

    def _launch_locally(
        self, request: LaunchRequest, env: dict[str, str], launcher_log: IO[bytes]
    ) -> subprocess.Popen[bytes]:
        launch = Launch(
            run_dir=str(request.run_dir.path),
            procs=request.procs_per_node,
            entry=RECIPE_RANK,
            environment=env,
            memory_limit_mb=self.rank_memory_limit_mb,
            log=str(request.run_dir.logs_dir / "launcher.log"),
        )
        warm = self.warm.take() if self.settings.rank_launcher == "warm" else None
        if warm is None:
            return start_launcher(launch, stdout=launcher_log, env=env)
        hand_over(warm, launch)
        return warm

    def fill_warm_pool(self, *, starting: bool) -> None:
        """A warm launcher for the next attempt, unless an attempt here is still starting or
        waits to be launched (`starting`: its imports would compete with theirs)."""
        if self.settings.rank_launcher != "warm" or starting:
            return
        self.warm.fill(self.rank_environment(procs_per_node=1))

    def _contain(self, request: LaunchRequest) -> Contained:
        return Contained.prepare(
            self.settings,
            self.uids,
            name=f"{request.job_id}-{request.attempt}-{request.node_rank}",
            nnodes=request.nnodes,
            memory_mb=attempt_memory_mb(self.slot_memory_mb, request.procs_per_node),
            writable=[request.run_dir.path, request.checkpoint_dir],
            peers=request.peers,
        )

    def _sandboxed(
        self,
        command: list[str],
        request: LaunchRequest,
        contained: Contained,
        gpus: tuple[int, ...] | None,
    ) -> list[str]:
        # A requirements environment, read-only: <env>/bin/python is its interpreter.
        extra = [Path(request.python).parent.parent] if request.python else []
        code = [Path(request.code_dir)] if request.code_dir else []
        return contained.command(
            command,
            self.settings,
            writable=[request.run_dir.path, request.checkpoint_dir],
            readable=[*code, *map(Path, request.input_paths), *extra],
            devices=device_nodes(gpus),
        )

    def ended(self, attempt: RunningAttempt) -> None:
        """Its ranks have exited and its end is recorded: its GPUs are free again."""
        if attempt.gpus and self.gpus:
            self.gpus.give_back(attempt.gpus)

    def close(self) -> None:
        self.warm.close()


def _visible(gpus: tuple[int, ...]) -> dict[str, str]:
    """The attempt's GPUs for CUDA, numbered as the driver's device nodes are (PCI order),
    so the indices mean the same devices as the /dev/nvidia<N> the sandbox binds."""
    return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus)), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
