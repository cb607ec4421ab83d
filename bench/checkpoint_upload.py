"""Step time of gpt-bench while its checkpoints upload to the artifact store, against the same
model with no checkpointing, side by side in one run (rounds interleaved).

    python -m bench.checkpoint_upload                # local store (the embedded default)
    python -m bench.checkpoint_upload --seaweedfs    # S3: a private SeaweedFS on loopback

Two gloo ranks on the CPU, the 23M-parameter model of bench/step.py. In the "upload" mode
rank 0 checkpoints every `--every` steps through the real loop (atomic, fsynced local write,
then the `artifact` record) and this process plays the node agent: it tails the records and
hands them to the real ArtifactUploader, which packs, puts and lists each checkpoint in the
background, as on a node. Reported: the median step time of each mode (the upload runs
beside the training steps, so its interference shows there), the mean including the
checkpoint steps, and the blocking part (the local atomic write, while ranks wait) on its own.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import torch

from ampfleet.workers.launch import threads_per_rank
from ampfleet.workers.training.loop import LoopConfig, Trainer
from ampfleet.workers.training.recipes.gpt_bench import GPTBenchHyperparameters, build
from ampfleet.workers.training.task import RecipeContext
from bench.step import CPU_MODEL
from tests.support.localranks import run_ranks

MODES = ("none", "upload")


def _steps(
    rank: int,
    world_size: int,
    mode: str,
    checkpoint_dir: str,
    events_file: str,
    steps: int,
    warmup: int,
    every: int,
) -> dict[str, list[float]]:
    from ampfleet.workers.rundir import RecordWriter

    torch.set_num_threads(threads_per_rank(world_size))
    torch.manual_seed(0)
    device = torch.device("cpu")
    task = build(
        GPTBenchHyperparameters(**CPU_MODEL, eval_batches=1),
        RecipeContext(rank, world_size, device, 0),
    )
    uploading = mode == "upload"
    writer = RecordWriter(Path(events_file), 0.5) if uploading and rank == 0 else None
    cfg = LoopConfig(
        max_steps=steps + warmup + 1,
        epochs=None,
        requested_precision="bf16",
        requested_allreduce_dtype="bf16",
        precision="bf16",
        allreduce_dtype="bf16",
        backend="gloo",
        device=device,
        rank=rank,
        world_size=world_size,
        seed=0,
        eval_every_steps=0,
        log_every_steps=steps + warmup + 1,
        checkpoint_every_steps=every if uploading else 0,
        keep_last_checkpoints=2,
        checkpoint_dir=Path(checkpoint_dir),
        guard_every_steps=0,
    )
    trainer = Trainer(task, cfg, writer)
    trainer.batches = trainer.data.micro_batches(start=0)
    step_s: list[float] = []
    wait_s: list[float] = []  # after each step: the checkpoint write on its steps, else ~0
    write_s: list[float] = []
    try:
        for index in range(warmup + steps):
            started = time.perf_counter()
            trainer.step_once()
            stepped = time.perf_counter()
            trainer._after_step()  # the checkpoint, on its steps: what training waits for
            if index >= warmup:
                step_s.append(stepped - started)
                wait_s.append(time.perf_counter() - stepped)
                if uploading and trainer.step % every == 0:
                    write_s.append(wait_s[-1])
    finally:
        trainer.comm.close()
        if writer is not None:
            writer.close()
    return {"step_s": step_s, "wait_s": wait_s, "write_s": write_s}


class _Agent:
    """The node agent's part: tail rank 0's records, hand `artifact` ones to the uploader."""

    def __init__(self, data_dir: Path) -> None:
        from ampfleet.api.jobs.service import resolve
        from ampfleet.core.db import session_scope
        from ampfleet.core.ids import new_id
        from ampfleet.core.migrate import upgrade
        from ampfleet.core.models import Job
        from ampfleet.core.settings import get_settings
        from ampfleet.core.spec import JobSpec
        from ampfleet.workers.uploads import ArtifactUploader

        settings = get_settings()
        upgrade(settings.effective_database_url)
        spec = JobSpec(recipe="gpt-bench", checkpoint={"keep_last": 2})  # type: ignore[arg-type]
        self.job_id = new_id("job")
        with session_scope() as session:
            session.add(
                Job(
                    id=self.job_id,
                    project="bench",
                    recipe="gpt-bench",
                    spec=spec.model_dump(mode="json"),
                    resolved=resolve(spec),
                    state="RUNNING",
                    priority=1,
                    attempt=1,
                    gang_size=2,
                )
            )
        self.uploader = ArtifactUploader(settings)
        self.data_dir = data_dir

    def follow(self, events_file: Path, stop: threading.Event) -> threading.Thread:
        from ampfleet.workers.rundir import RecordReader

        def tail() -> None:
            reader = RecordReader(events_file)
            while True:
                done = stop.is_set()
                records = [r for r in reader.read_new() if r.get("kind") == "artifact"]
                reader.commit()
                self.uploader.submit((self.job_id, 1), records)
                if done:
                    return
                time.sleep(0.2)

        thread = threading.Thread(target=tail, daemon=True)
        thread.start()
        return thread

    def listed(self) -> tuple[int, int]:
        from sqlalchemy import func, select

        from ampfleet.core.db import session_scope
        from ampfleet.core.models import Artifact

        with session_scope() as session:
            count, size = session.execute(
                select(func.count(), func.coalesce(func.max(Artifact.size), 0)).where(
                    Artifact.job_id == self.job_id
                )
            ).one()
        return int(count), int(size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--every", type=int, default=5, help="checkpoint every N steps")
    parser.add_argument("--seaweedfs", action="store_true", help="S3 store on SeaweedFS")
    args = parser.parse_args()

    with ExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        os.environ["AMPFLEET_DATA_DIR"] = str(root / "var")
        os.environ.pop("AMPFLEET_DATABASE_URL", None)
        (root / "var").mkdir()
        where = "local store"
        if args.seaweedfs:
            from tests.support.seaweedfs import running_seaweedfs

            server = stack.enter_context(running_seaweedfs(root / "seaweedfs"))
            server.create_bucket("bench")
            os.environ.update(server.environment("bench", "checkpoints"))
            where = "SeaweedFS S3 on loopback"
        else:
            os.environ["AMPFLEET_ARTIFACT_URL"] = ""
        agent = _Agent(root / "var")
        agent.uploader.start()
        results: dict[str, list[dict[str, list[float]]]] = {m: [] for m in MODES}
        for run in range(args.runs):
            for mode in MODES:
                events = root / f"events-{mode}-{run}.jsonl"
                events.touch()
                stop = threading.Event()
                tail = agent.follow(events, stop) if mode == "upload" else None
                result = run_ranks(
                    _steps,
                    2,
                    mode,
                    str(root / f"ckpt-{mode}-{run}"),
                    str(events),
                    args.steps,
                    args.warmup,
                    args.every,
                    timeout_s=1800,
                )[0]
                if tail is not None:
                    stop.set()
                    tail.join(timeout=30)
                results[mode].append(result)
        deadline = time.monotonic() + 600
        while not agent.uploader.settled((agent.job_id, 1)) and time.monotonic() < deadline:
            time.sleep(0.2)
        agent.uploader.stop(timeout=30)
        listed, size = agent.listed()

    steps = {m: [s for r in results[m] for s in r["step_s"]] for m in MODES}
    writes = [w for r in results["upload"] for w in r["write_s"]]
    baseline = statistics.median(steps["none"])
    print(
        f"gpt-bench bf16, 2 gloo ranks, {where}: {args.runs} runs x {args.steps} steps per mode, "
        f"a checkpoint every {args.every} steps ({size / 1e6:.0f} MB each; {listed} listed "
        f"at the end, keep_last 2)"
    )
    print(f"{'mode':>22} {'median step s':>14} {'vs none':>8} {'mean step s':>12}")
    for mode in MODES:
        median = statistics.median(steps[mode])
        mean = statistics.fmean(
            s + w for r in results[mode] for s, w in zip(r["step_s"], r["wait_s"], strict=True)
        )
        label = "no checkpoints" if mode == "none" else "checkpoint + upload"
        print(f"{label:>22} {median:>14.3f} {median / baseline:>7.2f}x {mean:>12.3f}")
    print(
        f"blocking local atomic write: median {statistics.median(writes):.3f} s "
        f"(max {max(writes):.3f} s) over {len(writes)} checkpoints"
    )


if __name__ == "__main__":
    main()
