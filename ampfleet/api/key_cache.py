"""Keys verified a moment ago, remembered for `key_cache_ttl_s` (2 s by default).

Every request reads its key's row, and a client's requests come in bursts: under 20 clients
that read was a sixth of POST /v1/jobs' statements and a quarter of GET's. Only keys that
verified are remembered, keyed by a hash of the whole presented key, so a wrong secret or
an unknown prefix always goes to the database (and to the wrong-key rate limit). The price
is written down where it is paid: a key revoked through another API process keeps working
there for at most the TTL; the process that revokes it forgets it at once. 0 turns it off.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from datetime import datetime

MAX_KEYS = 10_000
"""Bounded: a process serving many keys forgets the least recently used first."""


@dataclass(frozen=True)
class VerifiedKey:
    id: str
    project: str
    role: str
    last_used_at: datetime | None


class KeyCache:
    def __init__(self, max_keys: int = MAX_KEYS) -> None:
        self._entries: OrderedDict[str, tuple[VerifiedKey, float]] = OrderedDict()
        self._lock = threading.Lock()
        self._max_keys = max_keys

    @staticmethod
    def _slot(presented: str) -> str:
        return hashlib.sha256(presented.encode()).hexdigest()

    def get(self, presented: str) -> VerifiedKey | None:
        slot = self._slot(presented)
        with self._lock:
            entry = self._entries.get(slot)
            if entry is None:
                return None
            if entry[1] <= time.monotonic():
                del self._entries[slot]
                return None
            self._entries.move_to_end(slot)
            return entry[0]

    def put(self, presented: str, key: VerifiedKey, ttl_s: float) -> None:
        if ttl_s <= 0:
            return
        with self._lock:
            self._entries[self._slot(presented)] = (key, time.monotonic() + ttl_s)
            self._entries.move_to_end(self._slot(presented))
            while len(self._entries) > self._max_keys:
                self._entries.popitem(last=False)

    def noted_use(self, presented: str, at: datetime) -> None:
        """The use was recorded: the next requests within the TTL need not record it again."""
        slot = self._slot(presented)
        with self._lock:
            entry = self._entries.get(slot)
            if entry is not None:
                self._entries[slot] = (replace(entry[0], last_used_at=at), entry[1])

    def forget(self, key_id: str) -> None:
        """Revoked here: refused from the next request on."""
        with self._lock:
            for slot in [s for s, (key, _) in self._entries.items() if key.id == key_id]:
                del self._entries[slot]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


verified_keys = KeyCache()
"""The API process's one cache."""
