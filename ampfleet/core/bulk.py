"""Many rows into one table, fast: COPY on PostgreSQL, a multi-row INSERT elsewhere.

The node agents' metric and log batches go through here; on PostgreSQL, COPY moves a batch
several times faster than even a multi-row INSERT.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Table, insert
from sqlalchemy.orm import Session

COPY_THRESHOLD = 200  # below this a plain INSERT costs less than setting up COPY


def insert_rows(
    session: Session, table: Table, columns: Sequence[str], rows: Sequence[Sequence[Any]]
) -> None:
    if not rows:
        return
    connection = session.connection()
    if connection.dialect.name == "postgresql" and len(rows) >= COPY_THRESHOLD:
        raw = connection.connection.driver_connection  # a psycopg (3) connection
        if raw is None:  # the pool invalidated it under us
            raise RuntimeError("the database connection was closed before its COPY")
        column_list = ", ".join(columns)
        with (
            raw.cursor() as cursor,
            cursor.copy(f"COPY {table.name} ({column_list}) FROM STDIN") as copy,
        ):
            for row in rows:
                copy.write_row(row)
        return
    session.execute(insert(table), [dict(zip(columns, row, strict=True)) for row in rows])
