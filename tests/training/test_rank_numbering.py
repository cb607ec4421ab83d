"""How torchrun numbers a multi-node job's ranks, with the flags a node agent launches it
with: one consecutive block per node, also for the uneven shares of a packed total (3 + 1),
the nodes in node-rank order where their addresses sort that way. `launch.rank_nodes`, which
names each rank's node for the job file, says the same."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ampfleet.workers.launch import rank_nodes, torchrun_args
from tests.support.fleet import free_port

SHOW_RANK = """
import os, pathlib
path = pathlib.Path(os.environ["RANKS_FILE"])
with path.open("a") as out:
    out.write(f"{os.environ['NODE']} {os.environ['RANK']} {os.environ['LOCAL_RANK']}\\n")
"""


def test_ranks_are_consecutive_per_node_in_node_rank_order(tmp_path: Path) -> None:
    shares = [("node-0", 3), ("node-1", 1)]
    addresses = ["127.0.0.1", "127.0.0.2"]  # sorted as node ranks are: see rank_nodes
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
    seen = sorted(
        (int(rank), node, int(local))
        for node, rank, local in (
            line.split() for line in (tmp_path / "ranks").read_text().splitlines()
        )
    )
    assert seen == [(0, "node-0", 0), (1, "node-0", 1), (2, "node-0", 2), (3, "node-1", 0)]
    assert [node for _, node, _ in seen] == rank_nodes(shares)
