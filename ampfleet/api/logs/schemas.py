"""Pydantic I/O models of the logs resource."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel


class LogLineOut(BaseModel):
    id: int
    attempt: int
    rank: int
    stream: str
    time: datetime
    line: str


class LogPage(BaseModel):
    items: list[LogLineOut]
    next_after: int | None
    dropped_lines: int
