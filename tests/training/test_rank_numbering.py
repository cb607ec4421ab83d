"""How torchrun numbers a multi-node job's ranks, with the flags a node agent launches it
with: one consecutive block per node, also for the uneven shares of a packed total (3 + 1),
but the nodes in the order of their addresses as strings, not their node ranks: here node
rank 0 (127.0.0.2) may get the last ranks. So the ranks say where they run themselves
(`nodes_of_ranks`, what straggler events name), and that is the truth."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

from ampfleet.workers.launch import torchrun_args
from tests.support.fleet import free_port

SHOW_RANK = """
import os, pathlib
import torch.distributed as dist
from ampfleet.workers.training.group import nodes_of_ranks
dist.init_process_group("gloo")
told = nodes_of_ranks(os.environ["NODE"])
path = pathlib.Path(os.environ["RANKS_FILE"])
with path.open("a") as out:
    out.write(f"{os.environ['NODE']} {os.environ['RANK']} {os.environ['LOCAL_RANK']} ")
    out.write(",".join(told) + "\\n")
dist.destroy_process_group()
"""


def test_ranks_are_consecutive_per_node_and_say_which_node_they_are_on(tmp_path: Path) -> None:
    shares = [("node-0", 3), ("node-1", 1)]
    addresses = ["127.0.0.2", "127.0.0.10"]  # as strings, node rank 1's sorts first
    script = tmp_path / "show_rank.py"
    script.write_text(SHOW_RANK)
    endpoint = f"{addresses[0]}:{free_port()}"
    launched = []
    for node_rank, ((node, procs), address) in enumerate(zip(shares, addresses, strict=True)):
        args = torchrun_args(
            run_dir="unused",
            nnodes=len(shares),
            procs_per_node=procs,
            rendezvous=endpoint,
            rendezvous_id="ranks",
            is_host=node_rank == 0,
            local_addr=address,
            logs_dir=str(tmp_path / f"logs-{node}"),
        )
        assert args[-3:] == ["-m", "ampfleet.workers.training.entry", "unused"]
        env = {**os.environ, "NODE": node, "RANKS_FILE": str(tmp_path / "ranks")}
        command = [sys.executable, "-m", "torch.distributed.run", *args[:-3], str(script)]
        launched.append(subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True))
    for process in launched:
        _, errors = process.communicate(timeout=180)
        assert process.returncode == 0, errors[-3000:]
    lines = [line.split() for line in (tmp_path / "ranks").read_text().splitlines()]
    seen = sorted((int(rank), node, int(local)) for node, rank, local, _ in lines)
    nodes = [node for _, node, _ in seen]
    # One consecutive block per node, local ranks in order (c10d puts node-1 first here).
    assert sorted(nodes) == ["node-0"] * 3 + ["node-1"]
    assert sum(a != b for a, b in itertools.pairwise(nodes)) == 1
    assert [local for _, node, local in seen if node == "node-0"] == [0, 1, 2]
    told = {tuple(names.split(",")) for *_, names in lines}
    assert told == {tuple(nodes)}  # every rank was told the same truth
