"""A script's own training loop under `ampfleet.train` on real gloo ranks: the run folder
and environment as script mode gives them, the records the node agent reads, checkpoints
resumed by a later attempt (on another world size too), fp16 loss scaling, FSDP and
preemption by SIGTERM."""

from __future__ import annotations

import json
import math
import os
import signal
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn import functional

import ampfleet.train
from ampfleet.workers.hardware_precision import cpu_supports_bf16
from ampfleet.workers.rundir import RunDir
from tests.support.localranks import RankFailedError, run_ranks
from tests.support.training import dump, records, script_run_folder

FEATURES = 16


def batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The same batch for a step and rank in every run: the data position is the step."""
    generator = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(8, FEATURES, generator=generator)
    return x, (x[:, 0] + x[:, 1] > 0).long()


def script(
    rank: int,
    world_size: int,
    run_dir: str,
    attempt: int = 1,
    *,
    save_every: int = 0,
    stop_after: int | None = None,
    inf_steps: tuple[int, ...] = (),
    sigterm_at: int | None = None,
) -> dict[str, Any]:
    """The shape of a user's DDP script with the session added; what it saw, to check."""
    os.environ.update(
        {
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(world_size),
            "LOCAL_WORLD_SIZE": str(world_size),
            "AMPFLEET_RUN_DIR": run_dir,
            "AMPFLEET_CHECKPOINT_DIR": json.loads(Path(run_dir, "job.json").read_text())[
                "checkpoint_dir"
            ],
            "AMPFLEET_JOB_ID": "job_script",
            "AMPFLEET_ATTEMPT": str(attempt),
        }
    )
    torch.manual_seed(0)
    session = ampfleet.train.init()
    model: nn.Module = nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model, optimizer = session.prepare(model, optimizer, grad_clip=1.0, batch_size=8)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.5)
    state = {"model": model, "optimizer": optimizer, "scheduler": scheduler, "epochs_seen": 0}
    step = session.restore(state)
    restored_from, restored_epochs = step, state["epochs_seen"]
    restored_weights = _weights(model)
    stepped: dict[int, bool] = {}
    while not session.should_stop():
        x, y = batch(step + 1, rank)
        with session.autocast():
            loss = functional.cross_entropy(model(x), y)
        if step + 1 in inf_steps and step + 1 not in stepped:  # not again after a rewind
            loss = loss * math.inf
        session.backward(loss)
        stepped[step + 1] = session.step()
        scheduler.step()
        step = session.steps_completed
        state["epochs_seen"] = step // 4
        session.report(step, {"loss": loss, "lr": scheduler.get_last_lr()[0]})
        if save_every and step % save_every == 0:
            session.save(state)
        if sigterm_at == step and rank == 1:  # one rank is told; both must stop alike
            os.kill(os.getpid(), signal.SIGTERM)
        if step == stop_after:  # the attempt dies here (its node lost, say), unsaved
            break
    if step != stop_after:
        session.save(state)
    session.close()
    return {
        "restored_from": restored_from,
        "restored_epochs": restored_epochs,
        "step": step,
        "stepped": stepped,
        "precision": session.precision,
        "restored_weights": restored_weights,
        "weights": _weights(model),
    }


def _weights(model: nn.Module) -> list[float]:
    return [float(p.detach().double().sum()) for p in model.parameters()]


def _run(run_dir: RunDir, world_size: int = 2, **options: Any) -> list[dict[str, Any]]:
    return run_ranks(partial(script, run_dir=str(run_dir.path), **options), world_size)


def _metrics(run_dir: RunDir) -> dict[int, dict[str, float]]:
    found: dict[int, dict[str, float]] = {}
    for record in records(run_dir.path):
        if record["kind"] == "metrics":
            assert record["step"] not in found, f"step {record['step']} reported twice"
            found[record["step"]] = record["values"]
    return found


def test_a_script_trains_in_bf16_with_a_bf16_reduction(tmp_path: Path) -> None:
    run_dir = script_run_folder(
        tmp_path,
        precision="bf16",
        allreduce_dtype="bf16",
        parallelism={"strategy": "ddp"},
        stop={"max_steps": 6},
    )
    results = _run(run_dir)
    assert [r["step"] for r in results] == [6, 6]  # stop.max_steps ended it
    assert run_dir.session_marker.exists()
    found = records(run_dir.path)
    setups = [r for r in found if r["kind"] == "setup"]
    assert setups[0] == {"kind": "setup", "time": setups[0]["time"], "precision": "bf16",
                         "allreduce_dtype": "bf16"}  # fmt: skip
    prepared = setups[-1]
    assert (prepared["strategy"], prepared["compute_dtype"], prepared["reduction_dtype"]) == (
        "ddp",
        "bf16",
        "bf16",
    ), dump(prepared)
    assert prepared["parameters_dtype"] == "fp32"
    metrics = _metrics(run_dir)
    assert sorted(metrics) == [1, 2, 3, 4, 5, 6]
    last = metrics[6]
    assert math.isfinite(last["loss"])
    assert last["allreduce_bytes"] > 0
    assert last["samples_per_s"] > 0
    assert last["skipped_steps"] == 0
    assert {"time_forward_s", "time_backward_s", "time_optimizer_s"} <= last.keys()
    assert last["lr"] == 0.05  # the script's own schedule: halved after 4 steps
    progress = [(r["step"], r["total_steps"]) for r in found if r["kind"] == "progress"]
    assert progress[-1] == (6, 6)
    checkpoints = [r["step"] for r in found if r.get("artifact_kind") == "checkpoint"]
    assert checkpoints == [6]
    assert any(r["kind"] == "usage" and r["step"] == 6 for r in found)


def test_a_later_attempt_resumes_from_the_checkpoint_and_reports_each_step_once(
    tmp_path: Path,
) -> None:
    spec = {"precision": "bf16", "allreduce_dtype": "bf16", "stop": {"max_steps": 16}}
    first = script_run_folder(tmp_path, attempt=1, **spec)
    _run(first, attempt=1, save_every=5, stop_after=12)
    second = script_run_folder(tmp_path, attempt=2, **spec)
    results = _run(second, attempt=2, save_every=5)
    # The first attempt died after step 12: its checkpoint of step 10 is the latest.
    assert [r["restored_from"] for r in results] == [10, 10]
    assert results[0]["restored_epochs"] == 2  # a plain value of the state, restored
    assert results[0]["step"] == 16
    earlier, later = _metrics(first), _metrics(second)
    assert sorted(earlier) == list(range(1, 13))
    assert sorted(later) == list(range(11, 17))  # nothing the checkpoint covers again
    rewound = [r["step"] for r in records(second.path) if r["kind"] == "rewound"]
    assert rewound == [10]  # what the first attempt reported past it is replaced
    # The same steps again, from the same weights, optimizer, schedule and data position.
    for step in (11, 12):
        assert later[step]["loss"] == earlier[step]["loss"], step
        assert later[step]["lr"] == earlier[step]["lr"]
    # The script's scheduler went on where it was: 0.1 halved after steps 4, 8, 12 and 16.
    assert [later[s]["lr"] for s in (13, 16)] == [0.0125, 0.00625]


def test_fp16_skips_the_step_of_an_injected_inf(tmp_path: Path) -> None:
    run_dir = script_run_folder(
        tmp_path, precision="fp16", allreduce_dtype="fp32", stop={"max_steps": 6}
    )
    results = _run(run_dir, inf_steps=(3,))
    assert results[0]["stepped"] == {1: True, 2: True, 3: False, 4: True, 5: True, 6: True}
    metrics = _metrics(run_dir)
    assert metrics[2]["skipped_steps"] == 0
    assert metrics[3]["skipped_steps"] == 1
    assert metrics[3]["loss_scale"] == metrics[2]["loss_scale"] / 2
    assert math.isfinite(metrics[6]["loss"])
    assert metrics[6]["skipped_steps"] == 1


def test_auto_falls_back_and_returns_to_the_last_checkpoint(tmp_path: Path) -> None:
    # `auto` computes in bf16 on a CPU that has bf16: a streak of 8 non-finite bf16 steps
    # moves it on to fp32. On a CPU without bf16 it computes in fp32 from the start, so the
    # same streak has nothing to fall back from and ends the run as diverged.
    run_dir = script_run_folder(tmp_path, precision="auto", stop={"max_steps": 20})
    inf_steps = tuple(range(6, 14))
    if not cpu_supports_bf16():
        with pytest.raises(RankFailedError, match=r"non-finite for 8 steps in a row .* fp32"):
            _run(run_dir, save_every=4, inf_steps=inf_steps)
        events = [r for r in records(run_dir.path) if r["kind"] == "event"]
        assert [e for e in events if e["reason"] == "precision_fallback"] == []
        return
    results = _run(run_dir, save_every=4, inf_steps=inf_steps)
    events = [r for r in records(run_dir.path) if r["kind"] == "event"]
    (fallback,) = [e for e in events if e["reason"] == "precision_fallback"]
    assert fallback["message"].startswith("bf16 -> fp32"), dump(fallback)
    assert "resumed from the checkpoint at step 4" in fallback["message"]
    assert results[0]["precision"] == "fp32"
    rewound = [r["step"] for r in records(run_dir.path) if r["kind"] == "rewound"]
    assert rewound == [4]
    assert results[0]["step"] == 20


def test_fsdp_shards_the_model_and_its_checkpoint_resumes_on_one_rank(tmp_path: Path) -> None:
    spec = {
        "precision": "bf16",
        "allreduce_dtype": "bf16",
        "parallelism": {"strategy": "fsdp"},
        "stop": {"max_steps": 6},
    }
    run_dir = script_run_folder(tmp_path, **spec)
    _run(run_dir, save_every=4, stop_after=5)
    prepared = [r for r in records(run_dir.path) if r["kind"] == "setup"][-1]
    assert (prepared["strategy"], prepared["gathered_dtype"], prepared["reduction_dtype"]) == (
        "fsdp",
        "bf16",
        "bf16",
    )
    metrics = _metrics(run_dir)
    assert metrics[4]["time_reduce_scatter_s"] > 0
    assert math.isfinite(metrics[4]["loss"])
    # The next attempt has one rank and DDP: the sharded checkpoint loads into it.
    again = script_run_folder(tmp_path, attempt=2, **{**spec, "parallelism": {"strategy": "ddp"}})
    (result,) = _run(again, world_size=1, attempt=2)
    assert (result["restored_from"], result["step"]) == (4, 6)
    assert sorted(_metrics(again)) == [5, 6]


def test_sigterm_on_one_rank_stops_both_at_the_same_step_with_a_checkpoint(
    tmp_path: Path,
) -> None:
    run_dir = script_run_folder(
        tmp_path, precision="fp32", allreduce_dtype="fp32", stop={"max_steps": 50}
    )
    results = _run(run_dir, sigterm_at=3)
    assert [r["step"] for r in results] == [10, 10]  # the ranks agree at the stop check
    found = records(run_dir.path)
    assert [r["step"] for r in found if r["kind"] == "preempted"] == [10]
    checkpoints = [r["step"] for r in found if r.get("artifact_kind") == "checkpoint"]
    assert checkpoints == [10]


def test_init_from_continues_another_jobs_checkpoint_or_starts_from_its_weights(
    tmp_path: Path,
) -> None:
    spec = {"precision": "bf16", "allreduce_dtype": "bf16", "stop": {"max_steps": 12}}
    straight = script_run_folder(tmp_path / "straight", **spec)
    theirs = _run(straight, save_every=8)  # ckpt-8 and, at the end, ckpt-12
    saved = tmp_path / "straight" / "checkpoints" / "ckpt-000000008"
    init = {"path": str(saved), "job": "job_source", "step": 8}

    continued = script_run_folder(tmp_path / "full", init_from={**init, "load": "full"}, **spec)
    ours = _run(continued)
    assert [r["restored_from"] for r in ours] == [8, 8]
    assert ours[0]["restored_epochs"] == 2  # the other entries of the state, too
    earlier, later = _metrics(straight), _metrics(continued)
    assert sorted(later) == [9, 10, 11, 12]
    for step in (9, 10, 11, 12):  # its weights, optimizer, schedule and RNG: the same steps
        assert later[step]["loss"] == earlier[step]["loss"], step
        assert later[step]["lr"] == earlier[step]["lr"]
    assert ours[0]["weights"] == theirs[0]["weights"]
    events = [r["reason"] for r in records(continued.path) if r["kind"] == "event"]
    assert events.count("initialized") == 1, events

    short = {**spec, "stop": {"max_steps": 3}}
    tuned = script_run_folder(tmp_path / "weights", init_from={**init, "load": "weights"}, **short)
    results = _run(tuned)
    assert [r["restored_from"] for r in results] == [0, 0]
    assert results[0]["restored_epochs"] == 0  # only the weights: its own state stays
    assert sorted(_metrics(tuned)) == [1, 2, 3]
    assert _metrics(tuned)[1]["lr"] == 0.1  # its own fresh schedule
    # The weights the other job had at step 8, exactly (fp32 master weights, saved as such).
    at_eight = script_run_folder(tmp_path / "eight", **{**spec, "stop": {"max_steps": 8}})
    assert results[0]["restored_weights"] == _run(at_eight)[0]["weights"]
