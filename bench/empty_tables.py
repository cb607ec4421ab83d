"""What the tests pay to empty the database between tests, on PostgreSQL: one TRUNCATE of
every table with RESTART IDENTITY (the baseline, what `empty_tables` ran before) against
`tests.support.env.empty_tables` (DELETE per table, then every sequence back to 1).

    python -m bench.empty_tables --calls 20 --runs 3

A fresh migrated database on the session's PostgreSQL (tests/support/services.py), with the
tables empty as most tests leave them nearly; medians of the runs' mean per call.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from sqlalchemy import text

from ampfleet.core import db
from tests.support.env import TABLES, empty_tables, environment, fresh_postgres_database


def _truncate() -> None:
    with db.get_engine().begin() as conn:
        conn.execute(text(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE"))


def _per_call_ms(empty: Callable[[], None], calls: int) -> float:
    started = time.monotonic()
    for _ in range(calls):
        empty()
    return (time.monotonic() - started) / calls * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with fresh_postgres_database() as url, environment({"AMPFLEET_DATABASE_URL": url}):
        empty_tables()  # connect once before timing
        found: dict[str, list[float]] = {"TRUNCATE": [], "DELETE": []}
        for _ in range(args.runs):
            found["TRUNCATE"].append(_per_call_ms(_truncate, args.calls))
            found["DELETE"].append(_per_call_ms(empty_tables, args.calls))
    medians = {name: statistics.median(values) for name, values in found.items()}
    for name, value in medians.items():
        print(f"{name:>8}: {value:.1f} ms a call ({len(TABLES)} tables)")
    print(f"DELETE is {medians['TRUNCATE'] / medians['DELETE']:.1f}x faster")


if __name__ == "__main__":
    main()
