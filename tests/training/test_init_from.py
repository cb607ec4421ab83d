"""`init_from` on real gloo ranks, in the built-in loop: a run that continues another job's
checkpoint ('full') reports the same losses, bit for bit, as that job did past it; one that
starts from its weights ('weights') trains from step 0 with them; a checkpoint of another
model is refused with the reason. (The rank-side API's side: test_script_session.py.)"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pytest

from ampfleet.workers.checkpoint_folders import checkpoint_path
from ampfleet.workers.training.initial import Initial
from tests.support.localranks import RankFailedError, run_ranks
from tests.support.training import losses, records, train_recipe

SETTINGS: dict[str, Any] = {"precision": "bf16", "allreduce_dtype": "bf16", "max_steps": 30}


def _entry(rank: int, world_size: int, out: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    return train_recipe(rank, world_size, out, **kwargs)


def _ranks(out: Path, **kwargs: Any) -> None:
    run_ranks(partial(_entry, out=str(out), kwargs=kwargs), 2)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The other job: 30 steps, a checkpoint every 10 (its folder keeps all three)."""
    out = tmp_path_factory.mktemp("source")
    _ranks(out, **SETTINGS, checkpoint_every=10)
    return out


def _initial(source: Path, step: int, load: str) -> Initial:
    return Initial(checkpoint_path(source / "checkpoints", step), load, "job_source", step)


def test_full_continues_the_other_jobs_training_where_its_checkpoint_stopped(
    source: Path, tmp_path: Path
) -> None:
    _ranks(tmp_path, **SETTINGS, initial=_initial(source, 20, "full"))
    started = [r for r in records(tmp_path) if r["kind"] == "started"]
    assert [s["resumed_from_step"] for s in started] == [20]
    events = [r for r in records(tmp_path) if r["kind"] == "event"]
    assert [e["reason"] for e in events] == ["initialized"]
    assert "continues job job_source from its checkpoint of step 20" in events[0]["message"]
    theirs, ours = losses(source), losses(tmp_path)
    assert sorted(ours) == list(range(21, 31))  # its step count goes on
    # The same weights, optimizer, schedule, RNG and data position: the same losses.
    assert [ours[s] for s in range(21, 31)] == [theirs[s] for s in range(21, 31)]
    # Its own checkpoint now, in its own folder: a restart resumes that one.
    assert (tmp_path / "checkpoints" / "ckpt-000000030").is_dir()


def test_weights_start_a_new_run_from_step_0_with_the_other_jobs_weights(
    source: Path, tmp_path: Path
) -> None:
    fresh, tuned = tmp_path / "fresh", tmp_path / "tuned"
    short = {**SETTINGS, "max_steps": 5}
    _ranks(fresh, **short)
    _ranks(tuned, **short, initial=_initial(source, 30, "weights"))
    started = [r for r in records(tuned) if r["kind"] == "started"]
    assert [s["resumed_from_step"] for s in started] == [0]
    events = [r for r in records(tuned) if r["kind"] == "event"]
    expected = "starts from the weights of job job_source at step 30"
    assert [e["message"] for e in events] == [expected]
    from_scratch, from_weights = losses(fresh), losses(tuned)
    assert sorted(from_weights) == [1, 2, 3, 4, 5]
    # Trained weights start far below an untrained model's loss, near where they ended.
    assert from_weights[1] < 0.5 * from_scratch[1]
    assert from_weights[1] < 2 * losses(source)[30]


def test_a_checkpoint_of_another_model_is_refused_with_the_reason(
    source: Path, tmp_path: Path
) -> None:
    wider = {**SETTINGS, "max_steps": 5, "hyperparameters": {"hidden": 64}}
    with pytest.raises(RankFailedError, match="init_from: the checkpoint of step 30 of job"):
        _ranks(tmp_path, **wider, initial=_initial(source, 30, "weights"))
