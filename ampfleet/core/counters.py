"""Fleet-wide counters and histograms for Prometheus, kept in the database.

Prometheus takes a counter that goes down for a restart and a sum over API replicas of a
per-process number for the fleet's; a counter written here, in the transaction that does what
it counts, does neither: it only goes up, and every API process exports the same value (the
README gives the `max without (instance)` that aggregates replicas).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from ampfleet.core.models import FleetCounter

METRIC_POINTS_INGESTED = "metric_points_ingested"
SCHEDULING_LATENCY = "scheduling_latency_seconds"
SCHEDULING_LATENCY_BUCKETS = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
INF = "+Inf"
SUM = "sum"
"""The label of a histogram's running sum; its buckets are labelled by their upper bound."""


def add(session: Session, name: str, amount: float, *, label: str = "", shard: str = "") -> None:
    if not amount:
        return
    add_many(session, name, {label: amount}, shard=shard)


def add_many(session: Session, name: str, amounts: dict[str, float], *, shard: str = "") -> None:
    rows = [
        {"name": name, "label": label, "shard": shard, "value": amount}
        for label, amount in sorted(amounts.items())  # one lock order for every writer
        if amount
    ]
    if not rows:
        return
    dialect = session.connection().dialect.name
    insert = postgresql_insert if dialect == "postgresql" else sqlite_insert
    statement = insert(FleetCounter).values(rows)
    session.execute(
        statement.on_conflict_do_update(
            index_elements=["name", "label", "shard"],
            set_={"value": FleetCounter.value + statement.excluded.value},
        )
    )


def observe(
    session: Session, name: str, bounds: tuple[float, ...], values: Iterable[float]
) -> None:
    """Adds observations to a histogram: one per bucket (not cumulative), and their sum."""
    amounts: dict[str, float] = defaultdict(float)
    for value in values:
        bucket = next((str(b) for b in bounds if value <= b), INF)
        amounts[bucket] += 1
        amounts[SUM] += value
    add_many(session, name, amounts)


def totals(session: Session) -> dict[tuple[str, str], float]:
    """Every counter's value, summed over shards, by (name, label)."""
    rows = session.execute(
        select(FleetCounter.name, FleetCounter.label, func.sum(FleetCounter.value)).group_by(
            FleetCounter.name, FleetCounter.label
        )
    )
    return {(name, label): float(value) for name, label, value in rows}
