"""What the server processes write: JSON log lines, one record each."""

from __future__ import annotations

import json
from typing import Any


def json_lines(text: str) -> list[dict[str, Any]]:
    """Every line of `text` as the record it holds; fails on a line that is not one (a
    blank line included: nothing a JSON process writes is one)."""
    lines = text.splitlines()
    assert lines, "no lines at all"
    records = []
    for line in lines:
        record = json.loads(line)
        assert isinstance(record, dict), line
        assert {"time", "level", "role", "logger", "message"} <= set(record), line
        records.append(record)
    return records
