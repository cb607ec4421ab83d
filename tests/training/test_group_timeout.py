"""The groups ranks add beside the default one time out as it does (the job's process-group
timeout), not after torch's default half hour."""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from ampfleet.workers.training.group import started
from ampfleet.workers.training.ring import PairDirections
from tests.support.localranks import run_ranks

GROUP_TIMEOUT_S = 2.0
SILENT_S = 12.0
"""How long the peer stays alive and sends nothing: well past the group timeout, and its
exit, which would end the wait with a closed connection instead, comes after it."""


def _receive_from_a_silent_peer(rank: int, world_size: int) -> str:
    directions = PairDirections()  # the two-rank swap's groups, as a job of two gloo ranks has
    if rank == 1:
        time.sleep(SILENT_S)
        return "silent"
    _, receiving = directions.send_receive()
    try:
        started(dist.irecv(torch.empty(1), 1, group=receiving)).wait()
    except RuntimeError as exc:
        return str(exc)
    return "received"


def test_the_swap_groups_time_out_as_the_default_group_does() -> None:
    """A rank cut off from its peer (and its agent from the database) is ended by this
    timeout; the direction groups used to wait 30 minutes, so that the wait here ended only
    when the silent peer exited and closed its connections."""
    waited, _ = run_ranks(_receive_from_a_silent_peer, 2, timeout_s=GROUP_TIMEOUT_S)
    assert "Timed out" in waited, waited
    assert f"{GROUP_TIMEOUT_S * 1000:.0f}ms" in waited, waited
