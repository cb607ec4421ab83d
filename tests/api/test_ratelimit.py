"""Per-key token buckets: shared through Redis by every API process, or held in one."""

from __future__ import annotations

import uuid

import pytest

from ampfleet.api.ratelimit import LocalBuckets, RedisBuckets, buckets_for


def a_key() -> str:
    return f"key_{uuid.uuid4().hex}"


def script_calls(buckets: RedisBuckets) -> list[object]:
    """Records each run of the Redis script (which still runs)."""
    script = buckets._take
    calls: list[object] = []

    def counted(**kwargs: object) -> object:
        calls.append(kwargs)
        return script(**kwargs)

    buckets._take = counted  # type: ignore[method-assign]
    return calls


def test_two_api_processes_draw_from_one_bucket(redis_url: str) -> None:
    first, second = RedisBuckets(redis_url), RedisBuckets(redis_url)  # as two processes would
    key, rate, burst = a_key(), 0.01, 3.0
    assert [first.take(key, rate, burst) for _ in range(2)] == [0.0, 0.0]
    assert second.take(key, rate, burst) == 0.0
    wait = second.take(key, rate, burst)
    assert 50 < wait <= 100  # one token at 0.01/s, less what trickled in meanwhile
    assert first.take(key, rate, burst) > 0  # the other process sees the same empty bucket
    assert first.take(a_key(), rate, burst) == 0.0  # and every key has its own


@pytest.mark.parametrize("kind", ["redis", "local"])
def test_the_wait_is_at_most_one_token_at_the_rate(kind: str, redis_url: str) -> None:
    buckets = RedisBuckets(redis_url) if kind == "redis" else LocalBuckets()
    key = a_key()
    assert buckets.take(key, 0.01, 1.0) == 0.0
    assert 0 < buckets.take(key, 0.01, 1.0) <= 100.0


def test_a_process_leases_a_few_tokens_at_a_time(redis_url: str) -> None:
    """At 100/s with a burst of 1,000 a lease is 10 tokens: ten requests, one round trip;
    the shared bucket is charged for the whole lease at once."""
    buckets, key = RedisBuckets(redis_url, lease_lifetime_s=3600), a_key()
    calls = script_calls(buckets)
    assert [buckets.take(key, 100.0, 1000.0) for _ in range(10)] == [0.0] * 10
    assert len(calls) == 1
    assert buckets.take(key, 100.0, 1000.0) == 0.0
    assert len(calls) == 2
    # A small limit leases one token at a time: exact, as the API test of 429s relies on.
    small = a_key()
    assert [buckets.take(small, 0.01, 3.0) for _ in range(3)] == [0.0] * 3
    assert buckets.take(small, 0.01, 3.0) > 0
    assert len(calls) == 6


def test_only_a_leased_token_is_taken_without_redis(redis_url: str) -> None:
    """The API takes a token on its event loop only when this process holds a lease (or
    Redis is out); otherwise it is told to ask Redis, and nothing was taken meanwhile."""
    buckets, key = RedisBuckets(redis_url, lease_lifetime_s=3600), a_key()
    calls = script_calls(buckets)
    assert buckets.take_without_io(key, 100.0, 1000.0) is None  # no lease yet
    assert buckets.take(key, 100.0, 1000.0) == 0.0  # leases 10, spends 1
    assert [buckets.take_without_io(key, 100.0, 1000.0) for _ in range(9)] == [0.0] * 9
    assert buckets.take_without_io(key, 100.0, 1000.0) is None  # the lease is spent
    assert len(calls) == 1
    # One token at a time at this rate: a request that Redis refuses is refused here too.
    small, exact = RedisBuckets(redis_url), a_key()
    assert small.take(exact, 0.01, 1.0) == 0.0
    assert small.take_without_io(exact, 0.01, 1.0) is None
    assert small.take(exact, 0.01, 1.0) > 0


def test_local_buckets_always_answer_without_io() -> None:
    buckets, key = LocalBuckets(), a_key()
    assert buckets.take_without_io(key, 0.01, 1.0) == 0.0
    wait = buckets.take_without_io(key, 0.01, 1.0)
    assert wait is not None
    assert wait > 0


def test_without_redis_this_process_still_limits(caplog: pytest.LogCaptureFixture) -> None:
    unreachable = RedisBuckets("redis://127.0.0.1:1/0")
    calls = script_calls(unreachable)
    key = a_key()
    assert [unreachable.take(key, 0.01, 2.0) for _ in range(2)] == [0.0, 0.0]
    assert unreachable.take(key, 0.01, 2.0) > 0
    assert "rate limit from this process only" in caplog.text
    assert len(calls) == 1  # the next requests did not wait on Redis again
    on_the_loop = unreachable.take_without_io(key, 0.01, 2.0)  # nor does the event loop's
    assert on_the_loop is not None
    assert on_the_loop > 0


def test_the_deployment_picks_its_buckets(redis_url: str) -> None:
    assert isinstance(buckets_for(redis_url), RedisBuckets)
    assert isinstance(buckets_for("filesystem://"), LocalBuckets)
