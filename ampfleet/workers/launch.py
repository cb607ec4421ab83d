"""Launching one node's share of an attempt: torchrun under a parent-death guard.

`python -m ampfleet.workers.launch [--memory-limit-mb=N] TORCHRUN_ARGS...` sets
PR_SET_PDEATHSIG and then runs torchrun in-process, so killing the worker (even with
SIGKILL) takes torchrun down, and each rank (see training/entry.py) follows torchrun.

The launcher also sets what every rank inherits: a memory limit (its slot's share of the
node, see core/memory.py), so one job cannot take the host down, and an environment built
from an allow-list, so no platform credential (database, broker, secret key) reaches code
that runs in a rank.
"""

from __future__ import annotations

import contextlib
import logging
import os
import runpy
import signal
import sys
import traceback
from collections.abc import Mapping
from pathlib import Path

from ampfleet.workers.netif import socket_interface_environment
from ampfleet.workers.parent_death import PARENT_PID_VARIABLE, die_with_parent
from ampfleet.workers.rank_memory import MEMORY_LIMIT_FLAG, apply_memory_limit

RANK_ENVIRONMENT = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "PYTHONPATH",  # operator-installed recipes may live on it
    "LD_LIBRARY_PATH",  # CUDA's libraries, on some hosts
)
"""Variables a rank gets from the worker as they are, when set."""
RANK_ENVIRONMENT_PREFIXES = (
    "LC_",
    "TORCH",
    "PYTORCH_",
    "OMP_",
    "MKL_",
    "KMP_",
    "NCCL_",
    "GLOO_",
    "CUDA_",
    "CUDNN_",
    "CUBLAS",
    "NVIDIA_",
    "MALLOC_",  # glibc's allocator (e.g. MALLOC_MMAP_THRESHOLD_, BENCHMARKS.md "FSDP")
)
"""Families of variables that tune torch, its thread pools, collectives, CUDA and the C
allocator."""


def threads_per_rank(ranks_at_once: int) -> int:
    """A rank's share of the cores this process may run on, among the most ranks the node
    runs at once (its slots): not among one job's ranks. Two one-rank jobs on a two-slot
    node with two threads each put four spinning OpenMP threads on two cores, and each step
    took about seven times as long (BENCHMARKS.md "Threads per rank")."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, (cores or 1) // max(1, ranks_at_once))


def rank_environment(
    worker: Mapping[str, str], *, ranks_at_once: int, node_address: str | None = None
) -> dict[str, str]:
    """The environment of torchrun and its ranks: the allow-listed part of the worker's, and
    no AMPFLEET_* setting (a rank reads everything it needs from its run folder). With the
    node's address, the collectives talk on its interface unless the operator chose one.
    `ranks_at_once`: the most ranks that share this node's cores (`threads_per_rank`), unless
    the operator set OMP_NUM_THREADS on the worker."""
    env = {
        name: value
        for name, value in worker.items()
        if name in RANK_ENVIRONMENT or name.startswith(RANK_ENVIRONMENT_PREFIXES)
    }
    if node_address is not None:
        env.update(socket_interface_environment(node_address, worker))
    env.setdefault("OMP_NUM_THREADS", str(threads_per_rank(ranks_at_once)))
    env["PYTHONUNBUFFERED"] = "1"
    return env


def launch_command(
    torchrun: list[str], *, memory_limit_mb: int | None, python: str | None = None
) -> list[str]:
    """`python`: the interpreter of a job's requirements environment, else the worker's."""
    limit = [] if memory_limit_mb is None else [f"{MEMORY_LIMIT_FLAG}={memory_limit_mb}"]
    return [python or sys.executable, "-m", "ampfleet.workers.launch", *limit, *torchrun]


RECIPE_RANK = "ampfleet.workers.training.entry"
"""The rank entry of a recipe: the platform's training loop."""
SCRIPT_RANK = "ampfleet.workers.training.script"
"""The rank entry of a script (`code.command`): runs the command as its child."""


def torchrun_args(
    *,
    run_dir: str,
    nnodes: int,
    procs_per_node: int,
    rendezvous: str | None,
    rendezvous_id: str,
    is_host: bool,
    local_addr: str,
    logs_dir: str,
    rank_entry: str = RECIPE_RANK,
) -> list[str]:
    args = [
        f"--nnodes={nnodes}",
        f"--nproc-per-node={procs_per_node}",
        "--max-restarts=0",
        f"--log-dir={logs_dir}",
    ]
    if nnodes == 1 or rendezvous is None:
        args.append("--standalone")
    else:
        args += [
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={rendezvous}",
            f"--rdzv-id={rendezvous_id}",
            f"--rdzv-conf=is_host={'true' if is_host else 'false'},join_timeout=120",
            f"--local-addr={local_addr}",
        ]
    return [*args, "-m", rank_entry, run_dir]


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def forward_to_ranks(signum: int, _frame: object) -> None:
    """torchrun starts each rank in a session of its own, so a signal to this process group
    never reaches them: pass it on to every child."""
    for child in children(os.getpid()):
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signum)


def main() -> None:
    die_with_parent()
    os.environ[PARENT_PID_VARIABLE] = str(os.getpid())  # the ranks' parent: torchrun, here
    args = sys.argv[1:]
    if args and args[0].startswith(f"{MEMORY_LIMIT_FLAG}="):
        apply_memory_limit(int(args.pop(0).partition("=")[2]))  # before torchrun forks ranks
    # SIGUSR1 asks the ranks to checkpoint and exit (preemption; a script's rank passes it on
    # as SIGTERM to the script); torchrun must survive it.
    signal.signal(signal.SIGUSR1, forward_to_ranks)
    sys.argv = ["torchrun", *args]
    try:
        runpy.run_module("torch.distributed.run", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:  # torchrun's own exit: None is success, a message a failure
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    except Exception:
        traceback.print_exc()  # torchrun's account of the ranks that failed
        code = 1
    # torchrun has stopped every rank and closed its rendezvous: nothing is left to do but
    # the interpreter's teardown of torch, which takes most of a second that the node agent
    # would wait before it records the attempt's end (a failure, or the run's success).
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
