"""A rank slower than the others' median for several reported steps is named, once, and
once more when it has kept pace for as many; noise, a single slow step and a single fast one
are not (the watch has hysteresis)."""

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
    assert watch.observe(80, healthy)[1] == []
    assert watch.observe(90, healthy)[1] == []
    [recovered] = watch.observe(100, healthy)[1]
    assert recovered.startswith("rank 2 on node-b keeps pace again")
    assert "at most 1.25x" in recovered


def _observed(watch: StragglerWatch, ratios: list[float]) -> list[str]:
    """Rank 2 of four at each ratio of the others' pace, one reported step each."""
    events = []
    for index, ratio in enumerate(ratios):
        events += watch.observe(10 * index, [1.0, 1.0, ratio, 1.0])[1]
    return events


def test_a_noisy_rank_is_named_once_not_on_and_off() -> None:
    """Under CPU contention a slow rank's ratio wanders: mostly above the factor, dipping
    below it for one report now and then, sometimes to the others' pace. Judged report by
    report, that was eight events for one straggler; it is one, and one when it is over."""
    slow_with_dips = [1.7, 1.8, 1.6, 1.3, 1.7, 1.6, 1.9, 1.1, 1.6, 1.7, 1.8, 1.4, 1.6, 1.7, 1.9]
    back_but_noisy = [1.4, 1.2, 1.3, 1.2, 1.1, 1.0]  # near the factor, then at pace
    healthy_with_spikes = [1.0, 1.6, 1.0, 1.7, 1.6, 1.1, 1.55, 1.0, 1.6, 1.7, 1.0]
    watch = StragglerWatch(factor=1.5, reports=3)
    events = _observed(watch, slow_with_dips + back_but_noisy + healthy_with_spikes)
    assert [e.split(":")[0] for e in events] == [
        "rank 2 is a straggler",
        "rank 2 keeps pace again",
    ]
    assert "(1.60x at step 20)" in events[0]
    assert "(1.00x at step 200)" in events[1]  # the third report in a row at pace


def test_one_rank_has_no_others_and_two_ranks_compare_with_each_other() -> None:
    assert StragglerWatch(factor=1.5, reports=1).observe(10, [3.0]) == (None, [])
    ratio, [event] = StragglerWatch(factor=1.5, reports=1).observe(10, [1.0, 2.0])
    assert ratio == pytest.approx(2.0)
    assert event.startswith("rank 1 is a straggler")


def _turns(seconds: int, turn_s: int) -> list[tuple[float, list[float]]]:
    """Two healthy ranks on a busy machine's cores, reported every second: each in turn
    runs 1.8x slower for `turn_s` seconds (another process on its core), then the other."""
    trace = []
    for second in range(seconds):
        slow = (second // turn_s) % 2
        compute = [1.0, 1.0]
        compute[slow] = 1.8
        trace.append((float(second), compute))
    return trace


def _events(watch: StragglerWatch, trace: list[tuple[float, list[float]]]) -> list[str]:
    events = []
    for index, (now, compute) in enumerate(trace):
        events += watch.observe(index + 1, compute, now=now)[1]
    return events


def test_healthy_ranks_taking_turns_on_a_busy_machine_are_not_named() -> None:
    """Ten minutes of two ranks each slow for 8 s at a time: every turn was a straggler, and
    its end another event, when three reports in a row were enough; a minute is required."""
    trace = _turns(600, turn_s=8)
    assert _events(StragglerWatch(factor=1.5, reports=3), trace) != []  # the old rule rang
    assert _events(StragglerWatch(factor=1.5, reports=3, sustained_s=60), trace) == []


def test_a_rank_slow_for_over_a_minute_is_named_once_and_back_once_a_minute_later() -> None:
    watch = StragglerWatch(factor=1.5, reports=3, sustained_s=60)
    slow = [(float(t), [1.0, 2.0]) for t in range(0, 90)]
    at_pace = [(float(t), [1.0, 1.0]) for t in range(90, 200)]
    events = _events(watch, slow + at_pace)
    assert [e.split(":")[0] for e in events] == [
        "rank 1 is a straggler",
        "rank 1 keeps pace again",
    ]
    assert "for 3 reported steps for 60 s (2.00x at step 61)" in events[0]
    assert "(1.00x at step 151)" in events[1]  # a minute at pace, too


def test_one_report_at_pace_starts_the_minute_again() -> None:
    watch = StragglerWatch(factor=1.5, reports=3, sustained_s=60)
    slow = [(float(t), [1.0, 2.0]) for t in range(0, 50)]
    blip = [(50.0, [1.0, 1.0])]
    slow_again = [(float(t), [1.0, 2.0]) for t in range(51, 111)]
    events = _events(watch, slow + blip + slow_again)
    assert events == []
    [named] = _events(watch, [(111.0, [1.0, 2.0])])
    assert named.startswith("rank 1 is a straggler")
