"""What script mode costs a plain DDP script: its steps/s under a bare `torchrun --standalone
--nproc-per-node 2 script.py` against the same script as a job's `code.command`, launched the
way a node launches it (workers/launch.py's launcher around torchrun, the script rank entry
training/script.py on every rank running the script as its child, inside the attempt's
containment: workers/containment.py, as bench/sandbox_cost.py sets it up), interleaved round
by round in one run.

    python -m bench.script_mode [--rounds 5] [--steps 200] [--warmup 20] [--unconfined]

The script: 2 gloo ranks, DDP over a 4-layer MLP (512 wide) in fp32, AdamW, its batches
drawn before the timed steps; it times its own steps and rank 0 writes them to a file
(AMPFLEET_OUTPUT_DIR's, else the working folder's). Prints each round and the medians of
the ratio of steps/s (ours / bare) and of the start-up difference (the end of the first
step, from launch); beside them, what load disturbs less: rank 0's CPU time per step, and
the CPU time of every process of the run (unconfined only: bwrap keeps its namespace's).
The order of the two alternates by round. `--unconfined` adds ours without the
containment, to tell the launcher's and rank entry's share from the sandbox's.
Run it as root (the uid and cgroups need it); elsewhere bubblewrap runs in a user namespace.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ampfleet.core.settings import Settings
from ampfleet.core.spec import JobSpec
from ampfleet.workers.containment import Contained, UidPool, attempt_memory_mb
from ampfleet.workers.launch import SCRIPT_RANK, launch_command, rank_environment, torchrun_args
from ampfleet.workers.rundir import RunDir

SCRIPT = """
import json, os, sys, time
began = time.time()
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

steps, warmup = int(sys.argv[1]), int(sys.argv[2])
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Sequential(
    *[layer for _ in range(4) for layer in (torch.nn.Linear(512, 512), torch.nn.ReLU())]))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
generator = torch.Generator().manual_seed(rank)
batches = [(torch.randn(64, 512, generator=generator), torch.randn(64, 512, generator=generator))
           for _ in range(steps)]
durations, first_step, cpu = [], None, None
for step, (x, y) in enumerate(batches, start=1):
    if step == warmup + 1:
        cpu = time.process_time()  # this rank's process, gloo's threads included
    started = time.perf_counter()
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    durations.append(time.perf_counter() - started)
    if step == 1:
        first_step = time.time()
    if rank == 0 and step % 50 == 0:
        print(f"step {step}/{steps} loss={loss.item():.4f}", flush=True)
if rank == 0:
    folder = os.environ.get("AMPFLEET_OUTPUT_DIR") or os.getcwd()
    with open(os.path.join(folder, "timing.json"), "w") as out:
        json.dump({"began": began, "first_step": first_step, "durations": durations,
                   "warmup": warmup, "cpu_s": time.process_time() - cpu}, out)
dist.destroy_process_group()
"""
MEMORY_PER_RANK_MB = 4096
COMMAND_TIMEOUT_S = 600


def figures(timing: dict[str, Any], launched: float, tree_cpu_s: float) -> dict[str, float]:
    """Wall-clock figures, and two that a loaded machine disturbs less: the CPU time of rank
    0's process per timed step, and the CPU time of every process of the run."""
    timed = timing["durations"][timing["warmup"] :]
    return {
        "steps_per_s": len(timed) / sum(timed),
        "start_s": timing["first_step"] - launched,
        "interpreter_s": timing["began"] - launched,
        "cpu_ms_per_step": 1000 * timing["cpu_s"] / len(timed),
        "tree_cpu_s": tree_cpu_s,
    }


def children_cpu_s() -> float:
    """CPU seconds of this process's finished children and all they waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_bare(folder: Path, code: Path, steps: int, warmup: int) -> dict[str, float]:
    work = folder / "bare"
    work.mkdir()
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
        str(code / "script.py"), str(steps), str(warmup),
    ]  # fmt: skip
    env = {"PATH": os.environ["PATH"], "HOME": str(work), "OMP_NUM_THREADS": "1"}
    launched, cpu = time.time(), children_cpu_s()
    done = subprocess.run(
        command, cwd=work, env=env, capture_output=True, text=True,
        timeout=COMMAND_TIMEOUT_S, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"bare torchrun failed: {done.stderr[-2000:]}")
    tree = children_cpu_s() - cpu
    return figures(json.loads((work / "timing.json").read_text()), launched, tree)


def job_file(
    run_dir: RunDir, code: Path, checkpoints: Path, steps: int, warmup: int, flush_s: float
) -> None:
    """The job file as a node agent writes it for a script job (agent.py)."""
    command = ["python", "script.py", str(steps), str(warmup)]
    spec = JobSpec.model_validate(
        {"code": {"bundle": "bnd_" + "b" * 26, "command": command}, "resources": {"procs": 2}}
    ).model_dump(mode="json")
    spec["code"]["sha256"] = "0" * 64
    job = {
        "job_id": "job_bench",
        "attempt": 1,
        "spec": spec,
        "checkpoint_dir": str(checkpoints),
        "process_group_timeout_s": 300,
        "metrics_flush_s": flush_s,
        "stop_grace_s": 30,
        "inputs": {},
        "node": "node-bench",
        "code_dir": str(code),
    }
    run_dir.job_file.write_text(json.dumps(job))


def run_ours(
    folder: Path, code: Path, steps: int, warmup: int, settings: Settings, *, contain: bool
) -> dict[str, float]:
    """`contain`: as the supervisor contains bundled code (else unconfined)."""
    run_dir = RunDir.for_attempt(folder / "runs", "job_bench", 1, 0)
    run_dir.logs_dir.mkdir(parents=True)
    checkpoints = folder / "checkpoints"
    job_file(run_dir, code, checkpoints, steps, warmup, settings.metrics_flush_s)
    args = torchrun_args(
        run_dir=str(run_dir.path), nnodes=1, procs_per_node=2, rendezvous=None,
        rendezvous_id="job_bench-1", is_host=True, local_addr="127.0.0.1",
        logs_dir=str(run_dir.logs_dir), rank_entry=SCRIPT_RANK,
    )  # fmt: skip
    command = launch_command(args, memory_limit_mb=MEMORY_PER_RANK_MB)
    env = rank_environment(os.environ, ranks_at_once=2, node_address="127.0.0.1")
    contained = None
    if contain:
        writable = [run_dir.path, checkpoints]
        contained = Contained.prepare(
            settings,
            UidPool(settings.sandbox_first_uid, settings.sandbox_uid_count),
            name=f"bench-{folder.name}",
            nnodes=1,
            memory_mb=attempt_memory_mb(MEMORY_PER_RANK_MB, 2),
            writable=writable,
        )
        command = contained.command(
            command, settings, writable=writable, readable=[code], devices=[]
        )
        env.update(contained.environment())
    launched, cpu = time.time(), children_cpu_s()
    try:
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S,
            check=False, stdin=subprocess.DEVNULL, start_new_session=True,
            preexec_fn=contained.enter if contained else None,
            pass_fds=contained.pass_fds if contained else (),
        )  # fmt: skip
    finally:
        if contained is not None:
            contained.close()
    timing = run_dir.output_dir / "timing.json"
    if done.returncode != 0 or not timing.exists():
        logs = "".join(
            p.read_text(errors="replace")[-1500:] for p in sorted(run_dir.logs_dir.glob("*"))
        )
        raise RuntimeError(f"script job failed ({done.returncode}): {done.stdout[-1500:]}{logs}")
    # bwrap does not hand its namespace's CPU time up to its parent: not known contained.
    tree = math.nan if contain else children_cpu_s() - cpu
    return figures(json.loads(timing.read_text()), launched, tree)


def line(name: str, f: dict[str, float]) -> str:
    return (
        f"{name} {f['steps_per_s']:.1f} steps/s, interpreter at {f['interpreter_s']:.2f}s, "
        f"first step at {f['start_s']:.2f}s, {f['cpu_ms_per_step']:.1f} ms CPU/step"
        + ("" if math.isnan(f["tree_cpu_s"]) else f", {f['tree_cpu_s']:.1f}s CPU in all")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--unconfined", action="store_true", help="Also ours, unconfined.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="script-mode-") as tmp:
        root = Path(tmp)
        data = root / "var"
        settings = Settings(data_dir=data, environment="test", secret_key="bench-" * 4)
        code = data / "bundles" / "script"
        code.mkdir(parents=True)
        (code / "script.py").write_text(SCRIPT)
        # The sandbox's uid reads the code through these.
        os.chmod(code / "script.py", 0o644)
        for path in (code, code.parent, data, root):
            os.chmod(path, 0o755)
        kinds = ["bare", "ours"] + (["unconfined"] if args.unconfined else [])
        results: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds}
        for round_ in range(args.rounds):
            order = kinds if round_ % 2 == 0 else kinds[::-1]
            for kind in order:
                folder = data / f"round-{round_}-{kind}"
                folder.mkdir()
                os.chmod(folder, 0o755)
                if kind == "bare":
                    found = run_bare(folder, code, args.steps, args.warmup)
                else:
                    found = run_ours(
                        folder, code, args.steps, args.warmup, settings, contain=kind == "ours"
                    )
                results[kind].append(found)
            bare, ours = results["bare"][-1], results["ours"][-1]
            parts = [line("bare", bare), line("ours", ours)]
            if args.unconfined:
                parts.append(line("ours unconfined", results["unconfined"][-1]))
            print(
                f"round {round_}: " + "; ".join(parts) + f"; ratio "
                f"{ours['steps_per_s'] / bare['steps_per_s']:.3f}x, start-up "
                f"{ours['start_s'] - bare['start_s']:+.2f}s",
                flush=True,
            )
        summary(results, args.rounds)


def summary(results: dict[str, list[dict[str, float]]], rounds: int) -> None:
    bare = results["bare"]
    for kind in [k for k in results if k != "bare"]:
        pairs = list(zip(results[kind], bare, strict=True))
        ratios = [o["steps_per_s"] / b["steps_per_s"] for o, b in pairs]
        starts = [o["start_s"] - b["start_s"] for o, b in pairs]
        cpu = [o["cpu_ms_per_step"] / b["cpu_ms_per_step"] for o, b in pairs]
        tree = [o["tree_cpu_s"] - b["tree_cpu_s"] for o, b in pairs]  # NaN: contained
        print(
            f"median over {rounds} rounds, {kind}: steps/s {kind}/bare "
            f"{statistics.median(ratios):.3f}x (range {min(ratios):.3f}-{max(ratios):.3f}); "
            f"start-up {statistics.median(starts):+.2f}s; rank 0's CPU per step "
            f"{statistics.median(cpu):.3f}x"
            + ("" if math.isnan(tree[0]) else f"; whole run's CPU {statistics.median(tree):+.1f}s")
        )


if __name__ == "__main__":
    main()
