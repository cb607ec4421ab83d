"""Launching a single-node attempt's ranks without torchrun, cold or warm.

torchrun imports torch (seconds) before it starts a rank, which imports it again. A
single-node attempt needs none of its elastic machinery: this launcher imports no torch
itself, starts one rank per slot with torchrun's environment (RANK, LOCAL_RANK,
WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT; rank 0 hosts the store), and
supervises them as torchrun does: it waits for them all, and when one fails it stops the
others; it exits 0 only if every rank did.

    cold  `python -m ampfleet.workers.local_launcher` spawns each rank as an interpreter of
          its own (`python -m <entry> RUN_DIR`).
    warm  `python -m ampfleet.workers.local_launcher --warm` is started by the node agent
          ahead of any attempt (warm_pool.py; for bundled code inside a sandbox of its
          own, warm_sandbox.py), imports torch and the training stack, and waits; the
          attempt's launch then forks each rank from it, imports done.

Either way the launch itself (`Launch`, one JSON line) comes on stdin, and the process
serves exactly one attempt: a warm launcher has run no job's code and holds no job's state
when it forks, and it never serves another. Each rank (cold or forked) starts as the cold
path's does: the environment, the memory limit and thread count of its attempt, Python's,
NumPy's and torch's random generators as a fresh interpreter has them, no descriptor but
stdin (/dev/null), stdout and stderr, dying with this launcher (parent_death.py) as this
launcher dies with the node agent, in a process group of its own as torchrun's ranks are:
the agent signals the launcher's group, and the launcher passes SIGTERM and SIGUSR1 on, so
a hung rank's stack dump (SIGUSR2, sent to the rank itself just before) is not cut short
by the SIGTERM that follows it.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass

from ampfleet.workers.parent_death import PARENT_PID_VARIABLE, die_with_parent
from ampfleet.workers.process_title import launcher_title, rank_title, set_title
from ampfleet.workers.rank_memory import apply_memory_limit

WARM_FLAG = "--warm"
WARM_TITLE = "ampfleet warm launcher"
"""What `ps` shows of a warm launcher no attempt took yet, with `, ready` once imported."""
STOP_GRACE_S = 30.0
"""After one rank failed, how long the others get between SIGTERM and SIGKILL (torchrun's)."""
log = logging.getLogger(__name__)
RANKS: dict[int, int] = {}
"""The ranks running now (pid -> number), for the signals this launcher passes on."""


@dataclass(frozen=True)
class Launch:
    """One attempt's ranks on this node, as the node agent asks for them."""

    run_dir: str
    procs: int
    entry: str
    """The rank's module: training/entry.py for a recipe."""
    environment: dict[str, str]
    """The ranks' environment (launch.py's allow-list, the attempt's GPUs and threads)."""
    memory_limit_mb: int | None
    log: str
    """The attempt's launcher log, where this process writes from the launch on."""
    workdir: str | None = None
    """Where the ranks run, if not where this launcher started: a warm sandbox's launcher
    started before its attempt's run folder was there (warm_sandbox.py)."""

    def to_line(self) -> bytes:
        return json.dumps(self.__dict__).encode() + b"\n"

    @classmethod
    def from_line(cls, line: bytes) -> Launch:
        return cls(**json.loads(line))


def warm_modules() -> list[str]:
    """What a warm launcher imports before any attempt: the training stack, and each
    installed recipe's build module (operator-installed code, never a tenant's)."""
    from ampfleet.core.recipes import installed_recipes

    builds = [r.build_path.partition(":")[0] for r in installed_recipes().values()]
    stack = ["ampfleet.workers.training.entry", "ampfleet.workers.training.rank"]
    # DDP's constructor imports torch._dynamo (about as long as torch itself); a cold rank
    # imports DCP only to load or save a checkpoint (training/checkpoint.py), safetensors
    # only to export.
    lazy = [
        "torch._dynamo",
        "torch.distributed.checkpoint",
        "torch.distributed.checkpoint.state_dict",
        "safetensors.torch",  # the export, at a run's end
    ]
    return [*stack, *lazy, *builds]


def warm_up() -> None:
    for module in warm_modules():
        try:
            importlib.import_module(module)
        except Exception:  # that recipe's ranks import it themselves, and fail there
            traceback.print_exc()


def free_port() -> int:
    """A port for rank 0's store on loopback, as torchrun's standalone mode picks one."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def rank_variables(rank: int, procs: int, port: int) -> dict[str, str]:
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "GROUP_RANK": "0",
        "WORLD_SIZE": str(procs),
        "LOCAL_WORLD_SIZE": str(procs),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        PARENT_PID_VARIABLE: str(os.getpid()),
    }


def start_ranks(launch: Launch, *, warm: bool) -> dict[int, int]:
    """Each rank's pid -> its number."""
    port = free_port()
    ranks = {}
    for rank in range(launch.procs):
        variables = rank_variables(rank, launch.procs, port)
        if warm:
            pid = os.fork()
            if pid == 0:
                _run_forked_rank(launch, rank, variables)  # never returns
            with contextlib.suppress(OSError):  # the child does it too: whichever is first
                os.setpgid(pid, pid)
        else:
            pid = subprocess.Popen(
                [sys.executable, "-m", launch.entry, launch.run_dir],
                env={**os.environ, **variables},
                stdin=subprocess.DEVNULL,
                process_group=0,
            ).pid
        ranks[pid] = rank
        RANKS[pid] = rank
    return ranks


def _run_forked_rank(launch: Launch, rank: int, variables: dict[str, str]) -> None:
    """In the forked child: the state a cold rank starts with, then the rank's entry."""
    code = 1
    try:
        os.setpgid(0, 0)
        RANKS.clear()
        for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        os.environ.update(variables)
        set_title(rank_title(rank, launch.entry, launch.run_dir))
        _fresh_random_state()
        import torch

        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
        from ampfleet.workers.training import entry

        code = entry.main([launch.entry, launch.run_dir], warm=True)
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _fresh_random_state() -> None:
    """Generators as a new interpreter has them: Python's and NumPy's seeded from the
    system's entropy, torch's at its fixed initial seed. (The launcher drew from none;
    this holds even if an import had.)"""
    random.seed()
    if (numpy := sys.modules.get("numpy")) is not None:
        numpy.random.seed()
    if (torch := sys.modules.get("torch")) is not None:
        torch.manual_seed(torch.initial_seed())


def supervise(ranks: dict[int, int]) -> int:
    """Waits for every rank; the first failure stops the rest. 0 only if all exited 0."""
    code = 0
    stop_at: float | None = None
    while ranks:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            if stop_at is not None and time.monotonic() >= stop_at:
                _signal(ranks, signal.SIGKILL)
                stop_at = None
            time.sleep(0.05)
            continue
        RANKS.pop(pid, None)
        if ranks.pop(pid, None) is None:
            continue
        if os.waitstatus_to_exitcode(status) != 0 and code == 0:
            code = 1
            _signal(ranks, signal.SIGTERM)
            stop_at = time.monotonic() + STOP_GRACE_S
    return code


def _signal(ranks: dict[int, int], sig: signal.Signals) -> None:
    for pid in ranks:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _pass_on(signum: int, _frame: object) -> None:
    _signal(RANKS, signal.Signals(signum))


def take_over(launch: Launch) -> None:
    """This process becomes the attempt's launcher: its environment, log and limit."""
    os.environ.clear()
    os.environ.update(launch.environment)
    log_fd = os.open(launch.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    devnull = os.open(os.devnull, os.O_RDONLY)
    for source, target in ((devnull, 0), (log_fd, 1), (log_fd, 2)):
        os.dup2(source, target)
    os.close(log_fd)
    os.close(devnull)
    if launch.workdir is not None:
        os.chdir(launch.workdir)
    if launch.memory_limit_mb is not None:
        apply_memory_limit(launch.memory_limit_mb)
    set_title(launcher_title(launch.run_dir))


def main(argv: list[str]) -> int:
    die_with_parent()
    warm = WARM_FLAG in argv
    # Preemption (SIGUSR1) and a stop (SIGTERM) are the ranks' to act on; this launcher
    # reports their exit.
    signal.signal(signal.SIGUSR1, _pass_on)
    signal.signal(signal.SIGTERM, _pass_on)
    if warm:
        set_title(WARM_TITLE + ", importing")
        warm_up()
        set_title(WARM_TITLE + ", ready")
    line = sys.stdin.buffer.readline()
    if not line:  # the agent shut down before it needed this launcher
        return 0
    launch = Launch.from_line(line)
    take_over(launch)
    print(f"{'warm' if warm else 'cold'} launch of {launch.procs} ranks", flush=True)
    return supervise(start_ranks(launch, warm=warm))


if __name__ == "__main__":
    code = main(sys.argv[1:])
    logging.shutdown()
    sys.stdout.flush()
    os._exit(code)  # no interpreter teardown of torch: the agent waits on this exit
