"""What the full sandbox costs a 2-rank job: steps/s and time to the first step, inside the
sandbox (bubblewrap namespaces with its own network, an unprivileged uid, the attempt's
cgroups, the seccomp filter: workers/containment.py, exactly as the supervisor launches
bundled code) against the same job unconfined, interleaved in one run.

    python -m bench.sandbox_cost [--rounds 5] [--steps 60] [--setup-rounds 20]

First the set-up alone: a bare interpreter (`python -S`, no torch) launched through the
whole containment and unconfined, interleaved, timed from asking for the launch to its first
line; the difference is what the sandbox adds to every start, without the seconds of torch
imports whose noise on a shared machine hides it in the job's own start-up figure.

The job: torchrun --standalone, 2 gloo ranks, DDP over a 4-layer MLP in bf16 autocast on
random data; each rank reports when its interpreter started (before imports) and its first
step, and rank 0 its steps/s after 10 warm-up steps. Prints each round and the medians:
the ratio of steps/s (sandboxed / unconfined) and the start-up difference in seconds.
Run it as root (the uid and cgroups need it); elsewhere it measures bubblewrap's user
namespace instead.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ampfleet.core.settings import Settings
from ampfleet.workers.containment import Contained, UidPool

TRAIN = """
import json, os, sys, time
began = time.time()
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")
torch.manual_seed(dist.get_rank())
model = DistributedDataParallel(torch.nn.Sequential(
    *[layer for _ in range(4) for layer in (torch.nn.Linear(512, 512), torch.nn.ReLU())]))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = torch.randn(64, 512)
steps, first, warm = int(sys.argv[1]), None, None
for step in range(steps):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(data).float().pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if step == 0:
        first = time.time()
    if step == 9:
        warm = time.perf_counter()
rate = (steps - 10) / (time.perf_counter() - warm)
if dist.get_rank() == 0:
    print(json.dumps({"start": float(os.environ["BENCH_T0"]), "began": began,
                      "first_step": first, "steps_per_s": rate}), flush=True)
dist.destroy_process_group()
"""


def run(folder: Path, steps: int, settings: Settings | None) -> dict[str, float]:
    script = folder / "code" / "train.py"
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        str(script),
        str(steps),
    ]
    env = {"PATH": os.environ["PATH"], "OMP_NUM_THREADS": "1", "HOME": str(folder)}
    contained = None
    if settings is not None:
        pool = UidPool(settings.sandbox_first_uid, settings.sandbox_uid_count)
        run_dir = folder / "run"
        contained = Contained.prepare(
            settings,
            pool,
            name=f"bench-{folder.name}",
            nnodes=1,
            memory_mb=8192,
            writable=[run_dir],
        )
        command = contained.command(
            command, settings, writable=[run_dir], readable=[script.parent], devices=[]
        )
        env.update(contained.environment())
    env["BENCH_T0"] = repr(time.time())
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
            env=env,
            preexec_fn=contained.enter if contained else None,
            pass_fds=contained.pass_fds if contained else (),
        )
    finally:
        if contained is not None:
            contained.close()
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return {"start_s": report["first_step"] - report["start"], "steps_per_s": report["steps_per_s"]}


def setup_once(folder: Path, settings: Settings | None) -> float:
    """Seconds from asking for the launch (containment included) to a bare interpreter's
    first line: the sandbox's own set-up cost, without torch's import to drown it."""
    command = [sys.executable, "-S", "-c", "import time; print(repr(time.time()))"]
    began = time.time()
    contained = None
    if settings is not None:
        pool = UidPool(settings.sandbox_first_uid, settings.sandbox_uid_count)
        run_dir = folder / "run"
        contained = Contained.prepare(
            settings,
            pool,
            name=f"setup-{folder.name}",
            nnodes=1,
            memory_mb=8192,
            writable=[run_dir],
        )
        command = contained.command(
            command, settings, writable=[run_dir], readable=[folder / "code"], devices=[]
        )
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
            env={"PATH": os.environ["PATH"]},
            preexec_fn=contained.enter if contained else None,
            pass_fds=contained.pass_fds if contained else (),
        )
    finally:
        if contained is not None:
            contained.close()
    return float(done.stdout.strip().splitlines()[-1]) - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument(
        "--setup-rounds", type=int, default=20, help="bare-interpreter launches of each kind"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sandbox-cost-") as tmp:
        root = Path(tmp)
        settings = Settings(data_dir=root / "var", environment="test", secret_key="bench-" * 4)
        (root / "var").mkdir()
        setup = root / "var" / "setup"
        (setup / "code").mkdir(parents=True)
        for path in (setup / "code", setup, root / "var"):
            os.chmod(path, 0o755)
        costs = []
        for _ in range(args.setup_rounds):
            costs.append(setup_once(setup, settings) - setup_once(setup, None))
        print(
            f"sandbox set-up, {args.setup_rounds} launches of each kind interleaved: median "
            f"{statistics.median(costs) * 1000:+.0f} ms to a bare interpreter's first line",
            flush=True,
        )
        ratios, extra_start = [], []
        for round_ in range(args.rounds):
            folder = root / "var" / f"round-{round_}"
            (folder / "code").mkdir(parents=True)
            (folder / "code" / "train.py").write_text(TRAIN)
            os.chmod(folder / "code" / "train.py", 0o644)
            for path in (folder / "code", folder, root / "var"):
                os.chmod(path, 0o755)
            bare = run(folder, args.steps, None)
            boxed = run(folder, args.steps, settings)
            ratios.append(boxed["steps_per_s"] / bare["steps_per_s"])
            extra_start.append(boxed["start_s"] - bare["start_s"])
            print(
                f"round {round_}: unconfined {bare['steps_per_s']:.1f} steps/s, first step at "
                f"{bare['start_s']:.2f}s; sandboxed {boxed['steps_per_s']:.1f} steps/s, first "
                f"step at {boxed['start_s']:.2f}s; ratio {ratios[-1]:.3f}x, "
                f"start-up {extra_start[-1]:+.2f}s",
                flush=True,
            )
        print(
            f"median over {args.rounds} rounds: steps/s sandboxed/unconfined "
            f"{statistics.median(ratios):.3f}x; start-up {statistics.median(extra_start):+.2f}s"
        )


if __name__ == "__main__":
    main()
