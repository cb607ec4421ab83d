"""A token bucket per API key: in Redis when the deployment has one, so that every API
process draws from the same bucket; in this process's memory otherwise (the embedded
default runs one API process)."""

from __future__ import annotations

import logging
import threading
import time
from functools import lru_cache
from typing import Protocol

import redis

log = logging.getLogger(__name__)


class Buckets(Protocol):
    def take(self, key_id: str, rate: float, burst: float) -> float:
        """0 if the request may go now, else seconds until it may."""
        ...

    def take_without_io(self, key_id: str, rate: float, burst: float) -> float | None:
        """What `take` answers, when it can answer without waiting on I/O; else None and
        nothing taken (the caller then calls `take` where it may block)."""
        ...


class LocalBuckets:
    def __init__(self) -> None:
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, key_id: str, rate: float, burst: float) -> float:
        now = time.monotonic()
        with self._lock:
            tokens, last = self._buckets.get(key_id, (burst, now))
            tokens = min(burst, tokens + (now - last) * rate)
            if tokens < 1.0:
                self._buckets[key_id] = (tokens, now)
                return (1.0 - tokens) / rate
            self._buckets[key_id] = (tokens - 1.0, now)
            return 0.0

    def take_without_io(self, key_id: str, rate: float, burst: float) -> float | None:
        return self.take(key_id, rate, burst)


# The same bucket arithmetic, atomic in Redis, on Redis's clock (the API processes' clocks
# need not agree), taking up to ARGV[3] tokens at once. Returns {tokens granted, wait in
# microseconds} (Lua numbers come back truncated to integers).
TAKE = """
local rate, burst, want = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local state = redis.call('HMGET', KEYS[1], 'tokens', 'last')
local tokens, last = tonumber(state[1]), tonumber(state[2])
if tokens == nil then tokens, last = burst, now end
tokens = math.min(burst, tokens + math.max(0, now - last) * rate)
local granted, wait = math.min(want, math.floor(tokens)), 0
if granted < 1 then granted, wait = 0, (1 - tokens) / rate end
tokens = tokens - granted
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'last', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
return {granted, math.ceil(wait * 1e6)}
"""
LEASE_S = 0.1  # a process takes at most this long's worth of a key's rate at once...
LEASE_OF_BURST = 0.05  # ...and at most this share of its burst; 1 token when they are small
LEASE_LIFETIME_S = 1.0  # leased tokens not used by then are given up, not hoarded
REDIS_RETRY_S = 5.0  # after Redis failed, requests do not wait on it again for this long


class RedisBuckets:
    """Shared buckets. To spare most requests a round trip, a process leases a few tokens
    at a time and spends them locally; with small limits the lease is one token, exact.
    If Redis cannot be reached, requests are not refused for that, nor kept waiting on
    it: this process's own buckets stand in, and Redis is tried again a few seconds on."""

    def __init__(
        self, url: str, lease_lifetime_s: float = LEASE_LIFETIME_S, key_prefix: str = ""
    ) -> None:
        self._client = redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)
        self._key_prefix = key_prefix
        self._lease_lifetime_s = lease_lifetime_s
        self._take = self._client.register_script(TAKE)
        self._fallback = LocalBuckets()
        self._leases: dict[str, tuple[int, float]] = {}  # key -> (tokens, good until)
        self._lock = threading.Lock()
        self._redis_down_until = 0.0

    def take_without_io(self, key_id: str, rate: float, burst: float) -> float | None:
        """A token of this process's lease (most requests), or the local fallback's answer
        while Redis is out; None when only Redis can say."""
        now = time.monotonic()
        with self._lock:
            tokens, until = self._leases.get(key_id, (0, now))
            if tokens > 0 and now < until:
                self._leases[key_id] = (tokens - 1, until)
                return 0.0
        if now < self._redis_down_until:
            return self._fallback.take(key_id, rate, burst)
        return None

    def take(self, key_id: str, rate: float, burst: float) -> float:
        answer = self.take_without_io(key_id, rate, burst)
        if answer is not None:
            return answer
        now = time.monotonic()
        want = max(1, int(min(rate * LEASE_S, burst * LEASE_OF_BURST)))
        try:
            granted, micros = self._take(
                keys=[f"{self._key_prefix}ampfleet:ratelimit:{key_id}"], args=[rate, burst, want]
            )
        except redis.RedisError as exc:
            log.warning("rate limit from this process only for %gs; redis: %s", REDIS_RETRY_S, exc)
            self._redis_down_until = now + REDIS_RETRY_S
            return self._fallback.take(key_id, rate, burst)
        if int(granted) == 0:
            return int(micros) / 1e6
        with self._lock:
            self._leases[key_id] = (int(granted) - 1, now + self._lease_lifetime_s)
        return 0.0


@lru_cache
def buckets_for(broker_url: str, key_prefix: str = "") -> Buckets:
    """`key_prefix` starts every Redis key (Settings.redis_key_prefix)."""
    if broker_url.startswith(("redis://", "rediss://")):
        return RedisBuckets(broker_url, key_prefix=key_prefix)
    return LocalBuckets()
