"""Run a function on gloo ranks, rank r inside host r of a network bed, and collect what
each returns: localranks.run_ranks across hosts, for tests and benchmarks on a link.

The ranks are processes started inside the hosts' namespaces (`ip netns exec`), so the
function travels by name (module and attribute) and its arguments as JSON; results come
back as localranks' do. Each rank talks on the host's link interface, as a job's ranks talk
on their node address's (workers/launch.py).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from datetime import timedelta
from importlib import import_module
from pathlib import Path
from typing import Any

import torch.distributed as dist

from tests.support.localranks import collect, run_as_rank
from tests.support.netbed import NetworkBed

# A port per call: a store's port just closed in host 0 may still be in TIME_WAIT.
_PORTS = itertools.count(29631)


def _name(fn: Callable[..., Any]) -> str:
    module = fn.__module__
    if module == "__main__":  # a script run with -m: its importable name
        module = sys.modules["__main__"].__spec__.name  # type: ignore[union-attr]
    return f"{module}:{fn.__qualname__}"


def run_on_bed(
    bed: NetworkBed, fn: Callable[..., Any], *args: Any, timeout_s: float = 300.0
) -> list[Any]:
    """`fn(rank, world_size, *args)` with rank r in host r of `bed`, for every host; the
    results in rank order. `args` must be JSON; `timeout_s` bounds the run and each
    collective."""
    port = str(next(_PORTS))
    with tempfile.TemporaryDirectory() as tmp:
        processes = []
        for rank in range(bed.hosts):
            env = {
                **os.environ,
                "MASTER_ADDR": bed.address(0),
                "MASTER_PORT": port,
                "RANK": str(rank),
                "WORLD_SIZE": str(bed.hosts),
                "GLOO_SOCKET_IFNAME": bed.interface,
            }
            argv = [sys.executable, "-m", __name__, tmp, _name(fn), json.dumps(args)]
            argv.append(str(timeout_s))
            processes.append(subprocess.Popen(bed.command(rank, argv), env=env))
        try:
            for process in processes:
                process.wait(timeout=timeout_s)
        finally:
            for process in processes:
                if process.poll() is None:
                    process.kill()
                    process.wait()
        left = [r for r in range(bed.hosts) if not (Path(tmp) / f"rank{r}.pt").exists()]
        if left:
            codes = [process.returncode for process in processes]
            raise RuntimeError(f"ranks {left} returned nothing (exit codes {codes})")
        return collect(tmp, bed.hosts)


def _main(out_dir: str, name: str, args: str, timeout_s: str) -> None:
    module, _, attribute = name.partition(":")
    fn = getattr(import_module(module), attribute)
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", timeout=timedelta(seconds=float(timeout_s)))
    run_as_rank(rank, world_size, out_dir, fn, tuple(json.loads(args)))


if __name__ == "__main__":
    _main(*sys.argv[1:5])
