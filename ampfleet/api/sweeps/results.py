"""What a sweep found, from its trial rows alone (the API imports no Optuna): the best trial,
the Pareto front, the precision report. Dominance is Optuna's definition: at least as good on
every objective and better on one."""

from __future__ import annotations

from collections.abc import Sequence

from ampfleet.core.models import SweepTrial
from ampfleet.core.sweep_spec import Objective, TrialState


def _signed(values: Sequence[float], objectives: Sequence[Objective]) -> list[float]:
    """Values turned so that larger is better for every objective."""
    return [v if o.direction == "maximize" else -v for v, o in zip(values, objectives, strict=True)]


def complete(trials: Sequence[SweepTrial], objectives: Sequence[Objective]) -> list[SweepTrial]:
    return [
        t
        for t in trials
        if t.state == TrialState.COMPLETE and t.values and len(t.values) == len(objectives)
    ]


def best(trials: Sequence[SweepTrial], objectives: Sequence[Objective]) -> SweepTrial | None:
    """By the first objective; the earliest trial wins a tie."""
    done = complete(trials, objectives)
    if not done:
        return None
    return max(done, key=lambda t: (_signed(t.values or [], objectives)[0], -t.number))


def pareto_front(trials: Sequence[SweepTrial], objectives: Sequence[Objective]) -> list[SweepTrial]:
    done = complete(trials, objectives)
    signed = {t.number: _signed(t.values or [], objectives) for t in done}

    def dominated(a: list[float]) -> bool:
        return any(
            all(x >= y for x, y in zip(b, a, strict=True)) and b != a for b in signed.values()
        )

    return [t for t in done if not dominated(signed[t.number])]


def precision_report(
    trials: Sequence[SweepTrial], objectives: Sequence[Objective]
) -> list[dict[str, object]]:
    """Per precision that complete trials ran in (as measured, not as asked): how many, the
    best of them by the first objective, its value, throughput and slot-seconds."""
    by_precision: dict[str, list[SweepTrial]] = {}
    for trial in complete(trials, objectives):
        precision = str(trial.measures.get("precision") or trial.params.get("precision", "?"))
        by_precision.setdefault(precision, []).append(trial)
    rows: list[dict[str, object]] = []
    for precision, group in sorted(by_precision.items()):
        top = best(group, objectives)
        rows.append(
            {
                "precision": precision,
                "trials": len(group),
                "best_trial": top.number if top else None,
                "value": (top.values or [None])[0] if top else None,
                "samples_per_s": top.measures.get("samples_per_s") if top else None,
                "slot_s": top.measures.get("slot_s") if top else None,
            }
        )
    return rows
