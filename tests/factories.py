"""Keyword-only builders of test inputs and database rows."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from ampfleet.core.db import session_scope
from ampfleet.core.models import Job, JobEvent, Metric, OutboxMessage


def job_spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "recipe": "digits",
        "resources": {"nodes": 1, "procs_per_node": 2},
        "precision": "bf16",
        "allreduce_dtype": "bf16",
        "stop": {"max_steps": 20},
    }
    spec.update(overrides)
    return spec


def row_counts() -> dict[str, int]:
    with session_scope() as session:
        return {
            model.__tablename__: session.scalar(select(func.count()).select_from(model)) or 0
            for model in (Job, JobEvent, Metric, OutboxMessage)
        }
