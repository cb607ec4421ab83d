"""The embedded default's two engines: writers serialise at BEGIN, readers never write."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from ampfleet.core.db import make_engine


def test_a_read_only_engine_refuses_writes_and_a_writer_sees_none(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'embedded.db'}"
    writer, reader = make_engine(url), make_engine(url, read_only=True)
    with writer.begin() as conn:
        conn.execute(text("CREATE TABLE t (x INTEGER)"))
        conn.execute(text("INSERT INTO t VALUES (1)"))
    with reader.begin() as conn:
        assert conn.execute(text("SELECT count(*) FROM t")).scalar_one() == 1
        with pytest.raises(OperationalError, match="readonly"):
            conn.execute(text("INSERT INTO t VALUES (2)"))
    with writer.connect() as conn:
        assert conn.execute(text("SELECT x FROM t")).scalars().all() == [1]
