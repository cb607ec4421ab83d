"""A rank slower than the others' median for several reported steps is named, once, and
once more when it keeps pace again; noise and a single slow step are not."""

from __future__ import annotations

import pytest

from ampfleet.workers.training.stragglers import StragglerWatch


def test_a_rank_slow_for_the_reports_in_a_row_is_a_straggler_once() -> None:
    watch = StragglerWatch(factor=1.5, reports=3, host_of={2: "node-b"})
    healthy, slow = [1.0, 1.05, 0.98, 1.0], [1.0, 1.0, 2.1, 1.0]
    assert watch.observe(10, healthy) == (pytest.approx(1.05), [])
    assert watch.observe(20, slow)[1] == []
    assert watch.observe(30, healthy)[1] == []  # one slow step: the count starts again
    assert watch.observe(40, slow)[1] == []
    assert watch.observe(50, slow)[1] == []
    ratio, events = watch.observe(60, slow)
    assert ratio == pytest.approx(2.1)
    assert len(events) == 1
    assert events[0].startswith("rank 2 on node-b is a straggler")
    assert "2.10x at step 60" in events[0]
    assert watch.observe(70, slow)[1] == []  # said once
    [recovered] = watch.observe(80, healthy)[1]
    assert recovered.startswith("rank 2 on node-b keeps pace again")


def test_one_rank_has_no_others_and_two_ranks_compare_with_each_other() -> None:
    assert StragglerWatch(factor=1.5, reports=1).observe(10, [3.0]) == (None, [])
    ratio, [event] = StragglerWatch(factor=1.5, reports=1).observe(10, [1.0, 2.0])
    assert ratio == pytest.approx(2.0)
    assert event.startswith("rank 1 is a straggler")
