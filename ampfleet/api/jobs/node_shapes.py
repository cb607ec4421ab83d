"""The registered nodes' shapes as admission reads them, up to a second old.

Every submit checks its job against every node (api/jobs/service.admit, by the rules of
core/job_creation.py), and nodes change rarely: reading them once a second rather than once
a submit took a sixth of POST /v1/jobs' statements off under load. A stale list only ever
delays a refusal: admission that refuses on it reads the nodes afresh and decides on those,
so a node registered a moment ago is never refused; a job admitted against a node removed a
moment ago waits with its pending reason, as one admitted just before the removal would.
"""

from __future__ import annotations

import threading
import time

from sqlalchemy.orm import Session

from ampfleet.core import job_creation
from ampfleet.core.fleet import NodeView
from ampfleet.core.settings import get_settings

MAX_AGE_S = 1.0


class RecentNodeShapes:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._read: tuple[str, float, list[NodeView]] | None = None

    def get(self, session: Session) -> list[NodeView]:
        """The list read at most MAX_AGE_S ago from this configuration's database."""
        database = get_settings().effective_database_url
        with self._lock:
            read = self._read
        if read is not None and read[0] == database and time.monotonic() - read[1] < MAX_AGE_S:
            return read[2]
        return self.refresh(session)

    def refresh(self, session: Session) -> list[NodeView]:
        nodes = job_creation.node_shapes(session)
        with self._lock:
            self._read = (get_settings().effective_database_url, time.monotonic(), nodes)
        return nodes

    def clear(self) -> None:
        with self._lock:
            self._read = None


recent_node_shapes = RecentNodeShapes()
