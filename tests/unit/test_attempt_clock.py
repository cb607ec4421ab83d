"""The loop's accounting of an attempt's time: where step-seconds stand after a save and a
rewind, and how much of an attempt a later resume point keeps."""

from __future__ import annotations

import pytest

from ampfleet.core.accounting import MAX_MARKS, AttemptClock, step_seconds_up_to


def test_a_resume_point_keeps_the_seconds_up_to_it() -> None:
    marks = [[6, 6.0], [8, 9.0]]
    assert step_seconds_up_to(8, 2, marks, 10, 12.0) == 9.0  # a save: exact
    assert step_seconds_up_to(7, 2, marks, 10, 12.0) == pytest.approx(7.5)  # between two
    assert step_seconds_up_to(2, 2, marks, 10, 12.0) == 0.0  # its own start: nothing kept
    assert step_seconds_up_to(1, 2, marks, 10, 12.0) == 0.0  # before it: nothing either
    assert step_seconds_up_to(10, 2, marks, 10, 12.0) == 12.0  # where it got to: all
    assert step_seconds_up_to(4, 2, [], 10, 12.0) == pytest.approx(3.0)  # no save: pro rata


def test_a_rewind_moves_the_lost_steps_to_recomputed() -> None:
    clock = AttemptClock(resumed_from=0)
    for _ in range(4):
        with clock.stepping():
            pass
    clock.step_s = 4.0  # as if each step took a second
    clock.saved(4)
    clock.step_s = 7.0
    clock.saved(7)
    clock.step_s = 9.0
    clock.rewound(4, reached=9)
    assert (clock.step_s, clock.recomputed_s) == (4.0, 5.0)
    assert clock.marks == [(4, 4.0)]
    assert clock.first_step_at is not None


def test_the_clock_remembers_only_its_latest_saves() -> None:
    clock = AttemptClock(resumed_from=0)
    for step in range(1, MAX_MARKS + 5):
        clock.saved(step)
    clock.saved(MAX_MARKS + 4)  # the same step saved twice is one mark
    assert [s for s, _ in clock.marks] == list(range(5, MAX_MARKS + 5))
    record = clock.record(MAX_MARKS + 4)
    assert record["step"] == MAX_MARKS + 4
    assert len(record["marks"]) == MAX_MARKS
