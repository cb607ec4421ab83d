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
    """Per precision tried (as the trial asked, else as measured), one trial's measured speed
    and quality: the trial with the best configuration (the best trial's other parameters)
    in that precision where one ran, else the best complete trial in it, else the one that
    went furthest; so a precision whose trials were all pruned or failed still has its row,
    saying why."""
    top = best(trials, objectives)
    configuration = _configuration(top) if top is not None else None
    by_precision: dict[str, list[SweepTrial]] = {}
    for trial in trials:
        by_precision.setdefault(_precision(trial), []).append(trial)
    rows: list[dict[str, object]] = []
    for precision, group in sorted(by_precision.items()):
        alike = [t for t in group if _configuration(t) == configuration]
        shown = _representative(alike or group, objectives)
        group_best = best(group, objectives)
        rows.append(
            {
                "precision": precision,
                "trials": len(group),
                "complete": len(complete(group, objectives)),
                "best_trial": group_best.number if group_best else None,
                "trial": shown.number,
                "same_configuration": bool(alike),
                "state": shown.state,
                "reason": shown.reason,
                "value": (shown.values or [None])[0]
                if shown.state == TrialState.COMPLETE
                else None,
                "last_reported": _last_reported(shown),
                "samples_per_s": shown.measures.get("samples_per_s"),
                "slot_s": shown.measures.get("slot_s"),
                "steps": shown.measures.get("steps"),
            }
        )
    return rows


def _precision(trial: SweepTrial) -> str:
    return str(trial.params.get("precision") or trial.measures.get("precision") or "unknown")


def _configuration(trial: SweepTrial) -> dict[str, object]:
    return {name: value for name, value in trial.params.items() if name != "precision"}


def _representative(group: Sequence[SweepTrial], objectives: Sequence[Objective]) -> SweepTrial:
    """The best complete trial; else the one that went furthest (the earliest of those)."""
    return best(group, objectives) or max(
        group, key=lambda t: (int(t.measures.get("steps") or 0), -t.number)
    )


def _last_reported(trial: SweepTrial) -> dict[str, float] | None:
    """The pruner's metric at the last step told: how far a trial that did not complete got."""
    if not trial.intermediate:
        return None
    step = max(int(s) for s in trial.intermediate)
    return {"step": step, "value": float(trial.intermediate[str(step)])}
