"""The idle watch's rule: a spell under the threshold that lasts the window is reported
once, the end of a reported spell once, and a dip shorter than the window never."""

from __future__ import annotations

from ampfleet.core.idle_policy import IdlePolicy
from ampfleet.workers.idle import IdleWatch, busiest
from ampfleet.workers.telemetry import node_totals

POLICY = IdlePolicy(below_percent=20, window_s=60, action="event")


def test_a_spell_as_long_as_the_window_is_reported_once_and_its_end_once() -> None:
    watch = IdleWatch()
    seen = [watch.observe(POLICY, t, 5.0) for t in (0, 30, 59)]
    assert seen == [None, None, None]
    assert watch.observe(POLICY, 60, 5.0) == "idle"
    assert watch.observe(POLICY, 90, 5.0) is None  # once per spell
    assert watch.observe(POLICY, 100, 80.0) == "busy_again"
    assert watch.observe(POLICY, 110, 80.0) is None


def test_a_dip_shorter_than_the_window_is_not_idle() -> None:
    watch = IdleWatch()
    for t, value in ((0, 5.0), (50, 5.0), (55, 25.0), (100, 5.0), (150, 5.0)):
        assert watch.observe(POLICY, t, value) is None
    assert watch.observe(POLICY, 160, 5.0) == "idle"  # 60 s after the dip ended


def test_no_sample_changes_nothing_and_forget_starts_over() -> None:
    watch = IdleWatch()
    watch.observe(POLICY, 0, 5.0)
    assert watch.observe(POLICY, 70, None) is None
    watch.forget()
    assert watch.observe(POLICY, 80, 5.0) is None  # a new spell from 80


def test_the_busiest_rank_counts_and_gpus_over_cpus() -> None:
    assert busiest({"cpu_percent_rank0": 3.0, "cpu_percent_rank1": 90.0, "rss_mb_rank0": 1e3}) == 90
    sample = {"cpu_percent_rank0": 100.0, "gpu_util_percent_rank0": 4.0}
    assert busiest(sample) == 4.0  # the CPU spins while it waits for the GPU: not busy
    assert busiest({"rss_mb_rank0": 10.0}) is None


def test_each_telemetry_sample_is_observed_once() -> None:
    """The telemetry's own interval paces it (test_telemetry: one sample per interval)."""
    watch = IdleWatch()
    assert watch.fresh(100.0)
    assert not watch.fresh(100.0)
    assert watch.fresh(110.0)


def test_a_node_sums_its_ranks_and_averages_their_gpus() -> None:
    attempts = [
        {"cpu_percent_rank0": 90.0, "rss_mb_rank0": 100.0, "gpu_util_percent_rank0": 80.0},
        {"cpu_percent_rank1": 50.0, "rss_mb_rank1": 300.0, "gpu_util_percent_rank1": 40.0},
        {},  # an attempt not sampled yet
    ]
    totals = node_totals(attempts)
    assert totals == {
        "ranks": 2.0,
        "cpu_percent": 140.0,
        "rss_mb": 400.0,
        "gpu_util_percent": 60.0,
        "gpu_memory_mb": 0.0,
    }
    assert node_totals([]) == {"ranks": 0.0, "cpu_percent": 0.0, "rss_mb": 0.0}
