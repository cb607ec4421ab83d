"""Sharded, reshardable checkpoints with torch.distributed.checkpoint (DCP), written while
training goes on, atomic at the checkpoint level.

One checkpoint is one folder, `ckpt-<step>/`: DCP's files (each rank writes the shards it
holds; a replicated DDP state is written once), `.metadata` (which DCP writes last, once every
rank's part is in), each rank's RNG, and `meta.json` (step, data position, loss scaler, the
lineage: strategy, world size, dtypes, and what `allreduce_dtype: auto` measured). DCP stores
tensors by their fully qualified names and global shapes, so a checkpoint loads into any
world size and either strategy.

It is written under `.ckpt-<step>.partial/` and renamed once complete: a rank killed while
the checkpoint is being persisted leaves a partial folder that nothing reads and the
previous checkpoint as the latest. Saving is asynchronous: `save` copies the state to host
memory and returns; a background thread (with a process group of its own, so its
collectives never interleave with training's) persists it; `poll` at a step boundary
publishes a finished one (rename, keep-last-K, the `artifact` record). Loading is DCP's or
`weights_only=True`: nothing in a checkpoint is unpickled.

Keep-last-K never deletes what the artifact store does not have yet, where an agent uploads
the checkpoints (stored_checkpoints.py): those newer than the newest the store lists wait for
it, up to AWAITING_UPLOAD_AT_MOST beyond the last K; one deleted past that is named in an
event.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn
from torch.optim import Optimizer

if TYPE_CHECKING:  # DCP is imported where a checkpoint is loaded or saved, not at the start
    from torch.distributed.checkpoint.storage import StorageWriter

from ampfleet.core.artifact_names import checkpoint_name
from ampfleet.workers import stored_checkpoints
from ampfleet.workers.checkpoint_folders import (
    META,
    checkpoint_path,
    partial_path,
    steps_available,
)
from ampfleet.workers.stored_checkpoints import Stored
from ampfleet.workers.training.group import new_group

FORMAT_VERSION = 2
_PARTIAL = re.compile(r"^\.ckpt-\d{9}\.partial$")


def rng_path(checkpoint: Path, rank: int) -> Path:
    return checkpoint / f"rng-rank{rank}.pt"


def latest(directory: Path) -> Path | None:
    steps = steps_available(directory)
    return checkpoint_path(directory, steps[-1]) if steps else None


def read_meta(checkpoint: Path) -> dict[str, Any]:
    meta: dict[str, Any] = json.loads((checkpoint / META).read_text())
    if meta.get("format") != FORMAT_VERSION:
        raise ValueError(f"{checkpoint.name}: unsupported checkpoint format {meta.get('format')}")
    return meta


def load(checkpoint: Path, state: dict[str, Any]) -> None:
    """Fills `state` (model and optimizer state dicts, shaped for this world and strategy)
    in place from the checkpoint, resharding as needed. Collective."""
    from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

    dcp_load(state, checkpoint_id=checkpoint)


@dataclass(frozen=True)
class Restored:
    """What `restore_latest` put back. The model, the optimizer and (on the world size the
    checkpoint was made on) this rank's RNG are restored already; the rest is the trainer's
    to adopt."""

    step: int
    setup: dict[str, Any]
    """What the checkpoint was made under: precision, AllReduce dtype, strategy, world size,
    backend and each phase's dtype."""
    scaler: dict[str, Any]
    """The loss scaler's state (a pass-through one's unless it was made in fp16)."""
    micro_batches_consumed: int = 0
    micro_batches_per_epoch: int = 0
    """The data position, in the saved world's micro-batches (the built-in loop's; a
    script's session keeps its data position in its own state, if at all)."""
    allreduce_auto: dict[str, Any] | None = None
    """What `allreduce_dtype: auto` measured (allreduce.AutoChoice's fields); None when
    the run did not measure."""


def restore_latest(
    directory: Path,
    model: nn.Module,
    optimizer: Optimizer,
    *,
    rank: int,
    world_size: int,
    extra: dict[str, Any] | None = None,
) -> Restored | None:
    """Loads the latest checkpoint into `model` and `optimizer` (any world size, either
    strategy), and this rank's RNG where the world size is the one it was made on; None when
    there is no checkpoint yet. `extra`: more entries saved beside them (a script's
    scheduler, its counters), loaded in place as DCP loads them. Collective."""
    path = latest(directory)
    if path is None:
        return None
    return restore(path, model, optimizer, rank=rank, world_size=world_size, extra=extra)


def restore(
    path: Path,
    model: nn.Module,
    optimizer: Optimizer,
    *,
    rank: int,
    world_size: int,
    extra: dict[str, Any] | None = None,
) -> Restored:
    """Loads this checkpoint as `restore_latest` loads the latest. Collective."""
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    meta = read_meta(path)
    model_state, optimizer_state = get_state_dict(model, optimizer)
    state = {**(extra or {}), "model": model_state, "optimizer": optimizer_state}
    load(path, state)
    if extra is not None:  # DCP replaced the values it does not load in place (not tensors)
        extra.update({name: state[name] for name in extra})
    set_state_dict(model, optimizer, model_state_dict=model_state, optim_state_dict=optimizer_state)
    if meta["setup"]["world_size"] == world_size:
        restore_rng(path, rank)
    return Restored(
        step=int(meta["step"]),
        setup=meta["setup"],
        scaler=meta["scaler"],
        micro_batches_consumed=int(meta.get("micro_batches_consumed", 0)),
        micro_batches_per_epoch=int(meta.get("micro_batches_per_epoch", 0)),
        allreduce_auto=meta.get("allreduce_auto"),
    )


def artifact_record(checkpoint: Path, step: int, lineage: dict[str, Any]) -> dict[str, Any]:
    """Rank 0's `artifact` record of a complete checkpoint: the node agent uploads its files
    as one object, listed with `lineage`."""
    return {
        "artifact_kind": "checkpoint",
        "name": checkpoint_name(step),
        "paths": [str(path) for path in sorted(checkpoint.iterdir()) if path.is_file()],
        "step": step,
        "details": lineage,
    }


Published = Callable[[Path, int, dict[str, Any]], None]
GivenUp = Callable[[list[int], Stored], None]
"""Told the steps keep-last-K deleted though the store lacked them, and what it has."""


_PendingSave = tuple[int, Future[Any], dict[str, Any]]
"""(step, the save's future, its meta) of the save in flight."""


class CheckpointManager:
    """One rank's side of the checkpoints: at most one save in flight; rank 0 publishes."""

    def __init__(
        self,
        directory: Path,
        *,
        rank: int,
        keep_last: int,
        before_publish: Callable[[], None] = lambda: None,
        on_published: Published | None = None,
        on_given_up: GivenUp | None = None,
        storage_writer: Callable[[Path], StorageWriter] | None = None,
    ) -> None:
        """`storage_writer`: DCP's writer of a checkpoint folder (FileSystemWriter)."""
        from torch.distributed.checkpoint.filesystem import FileSystemWriter

        self.directory = directory
        self.rank = rank
        self.keep_last = keep_last
        self.before_publish = before_publish
        self.on_published = on_published
        self.on_given_up = on_given_up
        self.storage_writer = storage_writer or FileSystemWriter
        self._pending: _PendingSave | None = None
        self.last_step: int | None = None
        """The step of the latest save started here."""
        self._group: dist.ProcessGroup | None = None
        if rank == 0:
            self.directory.mkdir(parents=True, exist_ok=True)
            for leftover in self.directory.iterdir():  # a crashed attempt's unfinished saves
                if _PARTIAL.match(leftover.name):
                    shutil.rmtree(leftover, ignore_errors=True)
        dist.barrier()  # nobody starts a save into a folder rank 0 is still cleaning

    @property
    def group(self) -> dist.ProcessGroup:
        # Created on first use, collectively: every rank saves at the same steps.
        if self._group is None:
            self._group = new_group(backend="gloo")
        return self._group

    def save(self, step: int, state: dict[str, Any], meta: dict[str, Any]) -> None:
        """Stages `state` (every rank's own shards) and returns while it is persisted."""
        self.wait()
        partial = partial_path(self.directory, step)
        partial.mkdir(parents=True, exist_ok=True)
        _atomic_save(capture_rng(), rng_path(partial, self.rank))
        if self.rank == 0:
            document = {"format": FORMAT_VERSION, "step": step, **meta}
            _atomic_write(partial / META, json.dumps(document, indent=1).encode())
        from torch.distributed.checkpoint.state_dict_saver import async_save

        future = async_save(
            state, storage_writer=self.storage_writer(partial), process_group=self.group
        )
        if not isinstance(future, Future):  # only a custom stager answers anything else
            raise TypeError(f"async_save answered a {type(future).__name__}, not a Future")
        self._pending = (step, future, meta)
        self.last_step = step

    def poll(self) -> None:
        """Publishes the save in flight if it is finished; never waits."""
        if self._pending is not None and self._pending[1].done():
            self._publish(self._pending)

    def wait(self) -> None:
        """Blocks until the save in flight (if any) is persisted and published."""
        if self._pending is not None:
            self._publish(self._pending)

    def close(self) -> None:
        try:
            self.wait()
        finally:
            if self._group is not None:
                dist.destroy_process_group(self._group)
                self._group = None

    def _publish(self, pending: _PendingSave) -> None:
        step, future, meta = pending
        self._pending = None
        future.result()  # a failed save raises here, and nothing is published
        if self.rank != 0:
            return
        self.before_publish()
        partial, final = partial_path(self.directory, step), checkpoint_path(self.directory, step)
        if final.exists():  # the same step saved again (after a precision fallback)
            shutil.rmtree(final)
        partial.replace(final)
        _fsync_directory(self.directory)
        stored = stored_checkpoints.read(self.directory)
        given_up = prune(self.directory, self.keep_last, stored)
        if given_up and stored is not None and self.on_given_up is not None:
            self.on_given_up(given_up, stored)
        if self.on_published is not None:
            self.on_published(final, step, meta)


AWAITING_UPLOAD_AT_MOST = 4
"""Checkpoints kept beyond the last K while the store lacks them: a bound on the disk an
unreachable store can cost."""


def not_uploaded_message(steps: list[int], stored: Stored, keep_last: int) -> str:
    """What a `checkpoint_not_uploaded` event says: keep-last-K deleted `steps` on this node
    before the store (which lists `stored`) had them."""
    has = (
        "the store has none yet"
        if stored.newest_step is None
        else f"the store's newest is step {stored.newest_step}"
    )
    return (
        f"deleted the checkpoint(s) of step {', '.join(map(str, steps))} on this node before "
        f"the artifact store had them: uploads are behind ({has}), and a node keeps at most "
        f"{AWAITING_UPLOAD_AT_MOST} waiting beyond checkpoint.keep_last={keep_last}"
    )


def prune(directory: Path, keep_last: int, stored: Stored | None = None) -> list[int]:
    """Deletes all but the newest `keep_last` checkpoints, except, where an agent uploads
    them (`stored` is what it said the store lists), those newer than the newest the store
    has: the only copies, kept until the store lists one as new, the oldest
    AWAITING_UPLOAD_AT_MOST of them (an upload in progress is of the oldest). Returns the
    steps it deleted that the store never had."""
    older = steps_available(directory)[:-keep_last]
    newest = None if stored is None else stored.newest_step
    awaiting = [] if stored is None else [s for s in older if newest is None or s > newest]
    kept = set(awaiting[:AWAITING_UPLOAD_AT_MOST])
    for step in older:
        if step not in kept:
            shutil.rmtree(checkpoint_path(directory, step), ignore_errors=True)
    return [step for step in awaiting if step not in kept]


def capture_rng() -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def restore_rng(checkpoint: Path, rank: int) -> bool:
    path = rng_path(checkpoint, rank)
    if not path.exists():
        return False
    state = torch.load(path, map_location="cpu", weights_only=True)
    torch.set_rng_state(state["torch"])
    random.setstate(_as_tuple(state["python"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
    return True


def _atomic_save(obj: Any, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("wb") as file:
        torch.save(obj, file)
        file.flush()
        os.fsync(file.fileno())
    tmp.replace(path)


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    tmp.replace(path)


def _fsync_directory(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _as_tuple(value: Any) -> Any:
    return tuple(_as_tuple(v) for v in value) if isinstance(value, list | tuple) else value
