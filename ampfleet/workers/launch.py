"""Launching one node's share of an attempt: torchrun under a parent-death guard.

`python -m ampfleet.workers.launch TORCHRUN_ARGS...` sets PR_SET_PDEATHSIG and then runs
torchrun in-process, so killing the worker (even with SIGKILL) takes torchrun down, and
each rank (see training/entry.py) follows torchrun.
"""

from __future__ import annotations

import contextlib
import os
import runpy
import signal
import sys
from pathlib import Path

from ampfleet.workers.training.entry import die_with_parent


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
    return [*args, "-m", "ampfleet.workers.training.entry", run_dir]


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
    # SIGUSR1 asks the ranks to checkpoint and exit (preemption); torchrun must survive it.
    signal.signal(signal.SIGUSR1, forward_to_ranks)
    sys.argv = ["torchrun", *sys.argv[1:]]
    runpy.run_module("torch.distributed.run", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
