"""Run a function on N real gloo ranks (separate processes) and collect what each returns."""

from __future__ import annotations

import os
import pickle
import tempfile
import traceback
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch.distributed as dist
import torch.multiprocessing as mp


def _worker(
    rank: int,
    world_size: int,
    init_file: str,
    out_dir: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    # A bounded timeout: a desynchronised collective fails the test instead of hanging it.
    dist.init_process_group(
        "gloo",
        init_method=f"file://{init_file}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=120),
    )
    try:
        result: Any = ("ok", fn(rank, world_size, *args))
    except Exception as exc:
        result = ("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    finally:
        dist.destroy_process_group()
    (Path(out_dir) / f"rank{rank}.pkl").write_bytes(pickle.dumps(result))


def run_ranks(fn: Callable[..., Any], world_size: int = 2, *args: Any) -> list[Any]:
    """`fn(rank, world_size, *args)` on each rank; returns the results in rank order."""
    with tempfile.TemporaryDirectory() as tmp:
        init_file = str(Path(tmp) / "init")
        mp.spawn(_worker, args=(world_size, init_file, tmp, fn, args), nprocs=world_size, join=True)
        results = []
        for rank in range(world_size):
            status, value = pickle.loads((Path(tmp) / f"rank{rank}.pkl").read_bytes())
            if status != "ok":
                raise AssertionError(f"rank {rank} failed: {value}")
            results.append(value)
        return results
