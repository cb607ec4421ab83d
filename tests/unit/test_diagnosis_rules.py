"""Each diagnosis rule fires on its crafted case and stays quiet on a healthy job."""

from __future__ import annotations

import dataclasses

import pytest

from ampfleet.api.diagnosis.rules import RULES, Breakdown, diagnose

HEALTHY = Breakdown(
    steps=50,
    step_time_s=0.100,
    phases_s={
        "data": 0.002,
        "forward": 0.030,
        "backward": 0.055,
        "optimizer": 0.008,
        "allreduce_exposed": 0.005,
    },
    precision="bf16",
    allreduce_dtype="bf16",
    mfu=0.42,
    skipped_steps=0.0,
    last_step=1000,
    cpu_percent_by_rank={0: 100.0, 1: 96.0},
    compute_s_by_rank={0: 0.093, 1: 0.090},
    allocated_slot_s=10_000.0,
    recomputed_slot_s=300.0,
    checkpoint_slot_s=200.0,
    checkpoint_every_steps=500,
)


def _with(**changes: object) -> Breakdown:
    return dataclasses.replace(HEALTHY, **changes)  # type: ignore[arg-type]


def _phases(**seconds: float) -> dict[str, float]:
    return {**HEALTHY.phases_s, **seconds}


def test_a_healthy_job_has_no_findings() -> None:
    assert diagnose(HEALTHY) == []
    assert all(rule(HEALTHY) is None for rule in RULES)


@pytest.mark.parametrize(
    ("rule", "case"),
    [
        ("exposed_allreduce", _with(phases_s=_phases(allreduce_exposed=0.040))),
        ("exposed_allreduce", _with(phases_s=_phases(allreduce_exposed=0.0, comm_exposed=0.04))),
        ("input_bound", _with(phases_s=_phases(data=0.030))),
        ("optimizer_heavy", _with(phases_s=_phases(optimizer=0.040))),
        ("fp16_overflows", _with(precision="fp16", skipped_steps=50.0)),
        ("cpu_straggler", _with(cpu_percent_by_rank={0: 100.0, 1: 98.0, 2: 30.0})),
        ("slow_rank", _with(compute_s_by_rank={0: 0.090, 1: 0.091, 2: 0.150})),
        ("low_mfu", _with(mfu=0.01)),
        ("recomputed_work", _with(recomputed_slot_s=2_000.0)),
        ("checkpoint_stalls", _with(checkpoint_slot_s=1_500.0)),
    ],
)
def test_each_rule_fires_on_its_case_alone(rule: str, case: Breakdown) -> None:
    assert [finding.rule for finding in diagnose(case)] == [rule]


def test_fp32_allreduce_is_told_to_halve_its_bytes() -> None:
    slow = _with(allreduce_dtype="fp32", phases_s=_phases(allreduce_exposed=0.050))
    (finding,) = diagnose(slow)
    assert finding.severity == "high"  # half of each step
    assert "allreduce_dtype to bf16" in finding.advice
    (half,) = diagnose(dataclasses.replace(slow, allreduce_dtype="bf16"))
    assert "allreduce_dtype" not in half.advice


def test_a_few_fp16_overflows_and_bf16_skips_are_not_findings() -> None:
    assert diagnose(_with(precision="fp16", skipped_steps=5.0)) == []
    assert diagnose(_with(precision="bf16", skipped_steps=50.0)) == []


def test_findings_come_most_severe_first() -> None:
    both = _with(mfu=0.01, phases_s=_phases(data=0.050))
    assert [(f.rule, f.severity) for f in diagnose(both)] == [
        ("input_bound", "high"),
        ("low_mfu", "info"),
    ]


def test_no_steps_no_shares() -> None:
    assert Breakdown(steps=0, step_time_s=0.0).share("data") == 0.0
