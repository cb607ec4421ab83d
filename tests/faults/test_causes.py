"""The mixed soak's restart causes: each restart goes to the fault that explains it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.faults.causes import Fault, Restart, by_cause, cause_of

T0 = datetime(2026, 1, 1, tzinfo=UTC)
WINDOWS = {"node_timeout_s": 8.0, "start_timeout_s": 30.0, "slack_s": 10.0}


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def restart(seconds: float, reason: str, message: str = "") -> Restart:
    return Restart("job_a", 1, at(seconds), reason, message)


KILL_A = Fault("worker", at(0), at(2), "node-a")
OUTAGE = Fault("postgres", at(60), at(80))
REDIS = Fault("redis", at(200), at(205))
FAULTS = [KILL_A, OUTAGE, REDIS]


def test_a_node_restarted_after_its_kill_is_the_kill() -> None:
    lost = restart(6, "node_restarted", "node node-a restarted while running this attempt")
    assert cause_of(lost, FAULTS, **WINDOWS) == KILL_A


def test_a_node_lost_during_or_after_the_outage_is_the_outage() -> None:
    for seconds in (70, 85, 97):
        lost = restart(seconds, "node_lost", "node node-b stopped heartbeating (none for 8s)")
        assert cause_of(lost, FAULTS, **WINDOWS) == OUTAGE


def test_another_nodes_kill_or_a_later_silence_explains_nothing() -> None:
    other = restart(5, "node_lost", "node node-b stopped heartbeating (none for 8s)")
    assert cause_of(other, FAULTS, **WINDOWS) is None
    late = restart(120, "node_lost", "node node-a stopped heartbeating (none for 8s)")
    assert cause_of(late, FAULTS, **WINDOWS) is None
    hung = restart(70, "hung", "no rank on node node-a moved on")
    assert cause_of(hung, FAULTS, **WINDOWS) is None


def test_a_start_never_claimed_goes_to_the_latest_fault_that_could_lose_it() -> None:
    assert cause_of(restart(230, "start_timeout"), FAULTS, **WINDOWS) == REDIS
    assert cause_of(restart(100, "start_timeout"), FAULTS, **WINDOWS) == OUTAGE


def test_restarts_are_listed_per_job_in_order() -> None:
    late = Restart("job_a", 2, at(230), "start_timeout", "")
    early = Restart("job_a", 1, at(6), "node_restarted", "node node-a restarted")
    assert by_cause([late, early], FAULTS, **WINDOWS) == {"job_a": [(early, KILL_A), (late, REDIS)]}
