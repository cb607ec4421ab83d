"""The half-precision hooks on a shaped link: the network changes how long a reduction
takes, never its numbers; and `auto` takes half precision only where it measured a gain."""

from __future__ import annotations

import pytest
import torch

from tests.network import ranks
from tests.support.bedranks import run_on_bed
from tests.support.localranks import run_ranks
from tests.support.netbed import network_bed

pytestmark = pytest.mark.usefixtures("netbed_available")


@pytest.mark.parametrize("world_size", [2, 3])
def test_hooks_give_the_same_bits_on_a_link_as_on_loopback(world_size: int) -> None:
    numel = world_size * 4096 * 5 + 7  # uneven pieces and ring chunks
    loopback = run_ranks(ranks.reduced, world_size, numel)
    with network_bed(world_size, rate="1gbit") as bed:
        linked = run_on_bed(bed, ranks.reduced, numel)
    for rank in range(world_size):
        for name in ranks.HALF:
            assert torch.equal(linked[rank][name], loopback[rank][name]), (rank, name)
            assert torch.equal(linked[rank][name], linked[0][name]), (rank, name)


@pytest.mark.slow  # 25 MiB buckets, as a job times them
def test_auto_takes_bf16_on_a_1gbit_link_and_every_rank_takes_the_same() -> None:
    """On a 1 Gbit/s link the bytes are the time: half the bytes pay. On loopback the
    casts and the halved bytes are of a size, and which wins depends on the CPU (one with
    AVX512-BF16 casts faster; BENCHMARKS.md): whichever it is, every rank takes the same
    dtype, or their buckets would not match."""
    with network_bed(2, rate="1gbit") as bed:
        linked = run_on_bed(bed, ranks.auto_choice)
    loopback = run_ranks(ranks.auto_choice, 2)
    assert [r["dtype"] for r in linked] == ["bf16", "bf16"], linked[0]["described"]
    assert "chose bf16" in linked[0]["described"]
    assert "fp32" in linked[0]["described"]
    assert loopback[0]["dtype"] == loopback[1]["dtype"], loopback
