"""Process groups of a job's ranks: the groups they add beside the default one, and leaving
without pulling a group from under a peer."""

from __future__ import annotations

import contextlib
import gc
from datetime import timedelta

import torch
import torch.distributed as dist


def new_group(ranks: list[int] | None = None, *, backend: str | None = None) -> dist.ProcessGroup:
    """dist.new_group with the default group's timeout. torch does not pass it on: a group
    made without one waits in a collective for its backend's default (30 minutes), whatever
    the job's process-group timeout. That timeout is the backstop for a rank whose agent
    cannot stop it (its node cut off from the database and from its peers): with the
    default, such a rank waited on for the half hour."""
    group: dist.ProcessGroup = dist.new_group(
        ranks, timeout=_default_group_timeout(), backend=backend
    )
    return group


def _default_group_timeout() -> timedelta | None:
    """The default group's timeout; None (the backend's default) where torch does not show
    it: it has no public getter, so this reads the backend's options."""
    world = dist.distributed_c10d._get_default_group()
    for device in ("cpu", "cuda"):
        with contextlib.suppress(AttributeError, RuntimeError):
            timeout = world._get_backend(torch.device(device)).options._timeout
            if isinstance(timeout, timedelta):
                return timeout
    return None


def leave_process_group(*, completed: bool) -> None:
    """Collect first: DDP and its communication hooks form reference cycles that hold the
    group, and would otherwise be freed at interpreter exit, after the group is gone. After
    a completed run, wait for every rank (a barrier), so that no rank closes its connections
    while a peer still uses them; after a failure, do not wait: the peers may be gone."""
    if not dist.is_initialized():
        return
    gc.collect()
    if completed:
        with contextlib.suppress(RuntimeError):  # a peer that died: leave all the same
            dist.barrier()
    dist.destroy_process_group()


def nodes_of_ranks(node: str) -> tuple[str, ...]:
    """Each rank's node, rank 0 first, as the ranks themselves say (one collective at start).

    torchrun gives each node one consecutive block of ranks, but orders the nodes as its
    rendezvous ranks them (c10d: by `--local-addr` as a string, then process id), not by
    the node ranks the scheduler gave them: rank 0 may be on any node. Only the ranks know.
    """
    names: list[object] = [None] * dist.get_world_size()
    dist.all_gather_object(names, node)
    return tuple(str(name) for name in names)


def started(work: dist.Work | None) -> dist.Work:
    """The handle of an asynchronous collective or send. torch answers None on a rank outside
    the collective's group; ours never leave a rank out, so None is a broken group."""
    if work is None:
        raise RuntimeError("this rank is not in the process group of the collective it started")
    return work
