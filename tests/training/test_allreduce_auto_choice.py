"""How `allreduce_dtype: auto` turns its figures into a choice (allreduce_auto.py): the
margins that keep it from flapping between runs, and choices read back from checkpoints
made before the wire and the rule were stored."""

from __future__ import annotations

import pytest

from ampfleet.workers.training.allreduce_auto import AutoChoice, choose, judge


@pytest.mark.parametrize(
    ("ratios", "taken"),
    [
        # The default wire stays while no other beats it by the margin (1.1x)...
        ({"swap": 0.50, "ring": 0.47, "gloo": 0.55}, ("swap", True)),
        # ...and gives way to one that does.
        ({"swap": 0.60, "ring": 0.70, "gloo": 0.50}, ("gloo", True)),
        # Half precision must beat fp32 by 1.1x: a tie keeps fp32 (the fastest is named).
        ({"swap": 0.97, "ring": 0.93, "gloo": 1.20}, ("ring", False)),
        # A default that does not pay does not hold back one that does.
        ({"swap": 0.95, "ring": 0.88, "gloo": 1.30}, ("ring", True)),
        # Three ranks and more: the ring is the default.
        ({"ring": 0.62, "gloo": 0.58}, ("ring", True)),
        ({"nccl": 0.52}, ("nccl", True)),
    ],
)
def test_the_choice_keeps_the_default_wire_and_fp32_unless_clearly_beaten(
    ratios: dict[str, float], taken: tuple[str, bool]
) -> None:
    default = "nccl" if "nccl" in ratios else "swap" if "swap" in ratios else "ring"
    assert choose(ratios, default) == taken


def test_a_wire_is_not_judged_faster_on_the_rounds_where_fp32_had_a_burst() -> None:
    """As on a loaded loopback: bursts hit fp32's calls in some rounds, and round by round
    the ring looked faster (a median paired ratio of 0.75x) while its times were 1.75x
    fp32's. The worse of the two medians counts: fp32 stays."""
    times = {
        "fp32": [0.060, 0.070, 0.080, 0.300, 0.400],
        "ring": [0.127, 0.140, 0.060, 0.200, 0.150],
    }
    medians, ratios = judge(times)
    assert medians == {"fp32": 0.080, "ring": 0.140}
    assert ratios["ring"] == pytest.approx(1.75)
    assert choose(ratios, "swap") == ("ring", False)
    # Where the load drifted slowly instead, the pairing is the worse measure, and counts.
    drifting = {"fp32": [0.10, 0.20, 0.30], "gloo": [0.09, 0.10, 0.29]}
    assert judge(drifting)[1]["gloo"] == pytest.approx(0.9)


def test_an_even_count_of_rounds_has_a_true_median() -> None:
    """The lower of the two middle ratios (torch's median) took the ring at 0.74x here."""
    times = {"fp32": [0.060, 0.070, 0.180, 0.260], "ring": [0.127, 0.140, 0.134, 0.120]}
    ratios = judge(times)[1]
    assert ratios["ring"] == pytest.approx((0.134 / 0.180 + 0.140 / 0.070) / 2)
    assert choose(ratios, "swap") == ("ring", False)


def _choice(**fields: object) -> AutoChoice:
    return AutoChoice(
        **{"half": "bf16", "bucket_mib": 25.0, "world_size": 2, "backend": "gloo", **fields}  # type: ignore[arg-type]
    )


def test_a_choice_from_before_the_rule_was_stored_keeps_its_old_rule() -> None:
    """Checkpoints from before `chose` carried the medians only: fp32 >= 1.1x half."""
    assert _choice(fp32_s=0.224, half_s=0.114, algorithm="swap").dtype == "bf16"
    assert _choice(fp32_s=0.040, half_s=0.038, algorithm="swap").dtype == "fp32"
    # ...and one stored since says what it took, whatever its medians.
    assert _choice(fp32_s=0.040, half_s=0.038, chose="bf16").dtype == "bf16"


def test_a_wire_no_longer_known_falls_back_to_the_default() -> None:
    assert _choice(fp32_s=1.0, half_s=0.5, algorithm="butterfly").wire is None
    assert _choice(fp32_s=1.0, half_s=0.5, algorithm="gloo").wire == "gloo"


def test_the_event_gives_every_wire_its_time_and_ratio_and_the_choice() -> None:
    described = _choice(
        fp32_s=0.2243,
        half_s=0.1136,
        algorithm="swap",
        candidates={"swap": 0.1136, "ring": 0.2301, "gloo": 0.1302},
        ratios={"swap": 0.506, "ring": 1.026, "gloo": 0.580},
        rounds=5,
        chose="bf16",
    ).describe()
    assert described == (
        "auto AllReduce measured on a 25.0 MiB bucket, median of 5 rounds: fp32 224.3 ms, "
        "bf16 swap 113.6 ms (0.506x), ring 230.1 ms (1.026x), gloo 130.2 ms (0.580x); "
        "chose bf16 by the swap wire"
    )
