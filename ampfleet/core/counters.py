"""Fleet-wide counters and histograms for Prometheus, kept in the database.

Prometheus takes a counter that goes down for a restart and a sum over API replicas of a
per-process number for the fleet's; a counter written here, in the transaction that does what
it counts, does neither: it only goes up, and every API process exports the same value (the
README gives the `max without (instance)` that aggregates replicas).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from sqlalchemy import event, func, select
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session, SessionTransaction

from ampfleet.core.models import FleetCounter

METRIC_POINTS_INGESTED = "metric_points_ingested"
JOBS_SUBMITTED = "jobs_submitted"
JOBS_FINISHED = "jobs_finished"
"""Labelled by the final state: each job is counted once, when it reaches one."""
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


_PENDING = "ampfleet.counters.pending"


def add_at_commit(session: Session, name: str, amounts: dict[str, float]) -> None:
    """Adds to a counter as the session's transaction commits, and not if it rolls back
    (a savepoint rolled back takes back what was added inside it).

    For counters that many transactions add to: rows locked as each transaction commits,
    all in one order, can neither deadlock against the rows a transaction locks on its way
    (a job's, then a counter's, then another job's) nor make other writers wait for the
    rest of a long transaction."""
    if session.get_transaction() is None:
        session.connection()  # begins it, so the entries below belong to it
    transaction = session.get_nested_transaction() or session.get_transaction()
    pending = session.info.setdefault(_PENDING, [])
    pending += [(transaction, name, label, amount) for label, amount in amounts.items() if amount]


def _inside(transaction: SessionTransaction | None, outer: SessionTransaction) -> bool:
    while transaction is not None:
        if transaction is outer:
            return True
        transaction = transaction.parent
    return False


@event.listens_for(Session, "before_commit")
def _write_pending(session: Session) -> None:
    if session.in_nested_transaction():
        return  # a savepoint released: its entries now belong to the enclosing transaction
    pending = session.info.pop(_PENDING, None)
    if not pending:
        return
    by_name: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for _, name, label, amount in pending:
        by_name[name][label] += amount
    for name in sorted(by_name):
        add_many(session, name, by_name[name])


@event.listens_for(Session, "after_soft_rollback")
def _drop_rolled_back(session: Session, previous_transaction: SessionTransaction) -> None:
    pending = session.info.get(_PENDING)
    if pending:
        pending[:] = [entry for entry in pending if not _inside(entry[0], previous_transaction)]


@event.listens_for(Session, "after_transaction_end")
def _forget(session: Session, transaction: SessionTransaction) -> None:
    if transaction.parent is None:  # a session closed without a commit counts nothing
        session.info.pop(_PENDING, None)
