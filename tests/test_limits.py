"""Queue-wide limits (``QueuePolicy.max_in_flight`` and ``rate_limit``): held inside the claim
scripts, so no interleaving of consumers in any zone exceeds them; a waiting pop sleeps until
capacity frees instead of polling. Both APIs, on a real redis-server.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis

from dynoqueue import (
    ConfigurationError,
    Message,
    QueuePolicy,
    RateLimit,
    RedisQueues,
    StaticShardSupplier,
)
from dynoqueue.embedded import RedisServer
from dynoqueue.model.partitions import partition_keys

SHARDS = ["a", "b", "c"]


# ------------------------------------------------------------------------------ the policy


@pytest.mark.parametrize("bad", [
    {"max_in_flight": -1}, {"max_in_flight": True}, {"max_in_flight": 2.5},
    {"rate_limit": (50, 1000)}, {"rate_limit": "50/s"},
    {"max_in_flight": 3, "partitions": 4}, {"rate_limit": RateLimit(3, 1000), "partitions": 4},
])
def test_bad_limits_are_configuration_errors(bad: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        QueuePolicy(**bad)


@pytest.mark.parametrize("count, per_ms", [(0, 1000), (5, 0), (True, 1000), (5, "1s")])
def test_a_bad_rate_limit_is_a_configuration_error(count: Any, per_ms: Any) -> None:
    with pytest.raises(ConfigurationError, match="rate_limit"):
        RateLimit(count, per_ms)


def test_limits_are_stored_only_when_set_and_read_back() -> None:
    assert "mif" not in QueuePolicy().to_json() and "rlc" not in QueuePolicy().to_json()
    policy = QueuePolicy(max_in_flight=7, rate_limit=RateLimit(50, 1000))
    assert '"mif":7' in policy.to_json() and '"rlc":50,"rlp":1000' in policy.to_json()
    assert QueuePolicy.from_json(policy.to_json()) == policy


def test_partition_shares_sum_to_the_whole() -> None:
    policy = QueuePolicy(partitions=4, max_in_flight=5, rate_limit=RateLimit(50, 1000))
    shares = [policy.share(k) for k in range(4)]
    assert [s.max_in_flight for s in shares] == [2, 1, 1, 1]
    assert [s.rate_limit.count for s in shares if s.rate_limit] == [13, 13, 12, 12]
    assert {s.partitions for s in shares} == {1}


# ---------------------------------------------------------------------------- on a server


def _leased_in_redis(client: Any, q: Any, partitions: int = 1) -> int:
    """Leases held now, every shard and partition, read at one instant (MULTI/EXEC: reads one
    after another could add a shard's count before an ack to another's after a claim)."""
    pipe = client.pipeline(transaction=True)
    for keys in partition_keys(q.keys, partitions):
        for shard in SHARDS:
            pipe.zcard(keys.unack_shard(shard))
    return sum(int(n) for n in pipe.execute())


@pytest.mark.parametrize("partitions", [1, 4])
def test_max_in_flight_holds_across_eight_consumers_in_three_zones(
        factories: Callable[..., Any], redis_server: RedisServer, partitions: int) -> None:
    policy = QueuePolicy(max_in_flight=5, partitions=partitions)
    zones = [factories(local) for local in SHARDS]
    queue_of = [zones[i % 3].get("jobs", policy) for i in range(8)]
    queue_of[0].push([Message(f"m{i}", "x") for i in range(60)])
    held, most_held, done = [0], [0], []
    lock, stop = threading.Lock(), threading.Event()

    def consume(q: Any) -> None:
        while not stop.is_set():
            got = q.pop(3, wait_ms=200)
            with lock:
                held[0] += len(got)
                most_held[0] = max(most_held[0], held[0])
            time.sleep(0.02 * len(got))
            with lock:
                held[0] -= len(got)
                done.extend(m.id for m in got)
            q.ack_many(got)

    probe = redis.Redis.from_url(redis_server.url)
    samples: list[int] = []
    consumers = [threading.Thread(target=consume, args=(q,)) for q in queue_of]
    for thread in consumers:
        thread.start()
    deadline = time.monotonic() + 20
    while len(set(done)) < 60 and time.monotonic() < deadline:
        samples.append(_leased_in_redis(probe, queue_of[0], partitions))
        time.sleep(0.002)
    stop.set()
    for thread in consumers:
        thread.join(timeout=10)
    probe.close()
    assert sorted(set(done)) == sorted(f"m{i}" for i in range(60))
    assert len(samples) > 100 and max(samples) <= 5, max(samples)
    assert most_held[0] <= 5
    assert max(samples) == 5  # the cap was reached, so it was what held the consumers back


def test_rate_limit_holds_in_every_window_and_reaches_the_rate(
        factories: Callable[..., Any], request: pytest.FixtureRequest) -> None:
    # The 10 s on the sync API; 4 s on asyncio (the same scripts hold the limit).
    seconds = 10 if request.node.callspec.params["factories"] == "sync" else 4
    policy = QueuePolicy(rate_limit=RateLimit(50, 1000))
    zones = [factories(local) for local in SHARDS]
    queue_of = [zones[i % 3].get("paced", policy) for i in range(8)]
    queue_of[0].push([Message(f"m{i}", "x") for i in range(800)])
    claimed_ms: list[int] = []  # from each receipt: "deliveries:claim ms" (the server's)
    lock, stop = threading.Lock(), threading.Event()

    def consume(q: Any) -> None:
        while not stop.is_set():
            got = q.pop(10, wait_ms=300)
            with lock:
                claimed_ms.extend(int(m.receipt.split(":")[1]) for m in got)
            q.ack_many(got)

    consumers = [threading.Thread(target=consume, args=(q,)) for q in queue_of]
    for thread in consumers:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in consumers:
        thread.join(timeout=10)
    times = sorted(claimed_ms)
    start = times[0]
    in_run = [t for t in times if t < start + seconds * 1000]
    worst = max(sum(1 for u in times[i:i + 60] if u < t + 1000) for i, t in enumerate(times))
    assert worst <= 50, worst
    assert len(in_run) / seconds >= 45, len(in_run)


def test_a_waiting_pop_held_by_max_in_flight_wakes_on_the_ack(
        factories: Callable[..., Any]) -> None:
    queues = factories()
    q = queues.get("one-at-a-time", QueuePolicy(max_in_flight=1))
    q.push([Message("first"), Message("second")])
    (first,) = q.unsafe_pop_all_shards(1)
    second = "second" if first.id == "first" else "first"
    assert q.unsafe_pop_all_shards(1) == []  # at the cap: nothing more, though one is due
    assert q.unsafe_pop_with_msg_id_all_shards(second) is None
    got: list[Any] = []
    waiter = threading.Thread(
        target=lambda: got.extend(q.unsafe_pop_all_shards(1, wait_ms=10_000)))
    started = time.monotonic()
    waiter.start()
    time.sleep(0.3)
    assert not got
    assert q.ack(first.id)
    waiter.join(timeout=10)
    assert [m.id for m in got] == [second]
    assert time.monotonic() - started < 3  # the ack's ring, not the 10 s wait


def test_a_waiting_pop_held_by_the_rate_limit_wakes_when_the_window_opens(
        factories: Callable[..., Any]) -> None:
    queues = factories()
    q = queues.get("two-a-second", QueuePolicy(rate_limit=RateLimit(2, 1000)))
    q.push([Message(f"m{i}") for i in range(3)])
    first = q.unsafe_pop_all_shards(5)
    assert len(first) == 2
    claimed = int(first[0].receipt.split(":")[1])
    (third,) = q.unsafe_pop_all_shards(1, wait_ms=5000)
    third_ms = int(third.receipt.split(":")[1])
    assert 1000 <= third_ms - claimed < 2500  # when the window opened, not at the wait's end


def test_a_lease_expiry_frees_a_place(factories: Callable[..., Any]) -> None:
    queues = factories()
    q = queues.get("expiring", QueuePolicy(max_in_flight=1))
    q.push([Message("a"), Message("b")])
    assert len(q.unsafe_pop_all_shards(1, lease_ms=300)) == 1
    # Held at the cap until the lease ends (its end is the wake-up), then one place again.
    got = q.unsafe_pop_all_shards(2, wait_ms=5000, min_count=1)
    assert len(got) == 1


def test_limited_pops_are_counted(factories: Callable[..., Any]) -> None:
    queues = factories()
    seen: list[tuple[str, str, int]] = []
    queues.set_events(lambda queue, kind, count: seen.append((queue, kind, count)))
    q = queues.get("counted", QueuePolicy(max_in_flight=2))
    q.push([Message(f"m{i}") for i in range(5)])
    assert len(q.unsafe_pop_all_shards(5)) == 2
    assert ("counted", "limited", 1) in seen
    before = len([s for s in seen if s[1] == "limited"])
    q.push([Message("late", timeout=60_000)])
    empty = factories().get("other", QueuePolicy(max_in_flight=2))
    assert empty.unsafe_pop_all_shards(1) == []  # nothing due: not limited
    assert len([s for s in seen if s[1] == "limited"]) == before


def test_a_queue_without_limits_keeps_its_stored_policy_text(
        factories: Callable[..., Any], redis_server: RedisServer) -> None:
    q = factories().get("plain", QueuePolicy(max_deliveries=3))
    q.push([Message("m")])
    raw = redis.Redis.from_url(redis_server.url).get(q.keys.policy)
    assert raw == b'{"max":3,"ttl":0,"ret":0,"dret":604800000,"strict":0}'


def test_a_worker_held_by_max_in_flight_waits_instead_of_spinning(
        redis_server: RedisServer) -> None:
    """A Worker of 8 slots on a queue that lets 2 messages be leased at once: 2 handlers at a
    time, and while both run its pops wait (the ack's ring wakes them) instead of polling."""
    from dynoqueue import Worker

    prefix = f"t{uuid.uuid4().hex[:10]}"
    running, most, done = [0], [0], [0]
    lock = threading.Lock()

    def handler(message: Message) -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.25)
        with lock:
            running[0] -= 1
            done[0] += 1

    admin = redis.Redis.from_url(redis_server.url)
    with RedisQueues.from_url(redis_server.url, key_prefix=prefix, unack_handler_interval_ms=0,
                              shard_supplier=StaticShardSupplier(["a"], "a")) as queues:
        q = queues.get("two", QueuePolicy(max_in_flight=2))
        q.push([Message(f"m{i}") for i in range(8)])
        claims_before = int(admin.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))
        with Worker(q, handler, concurrency=8, lease_ms=10_000):
            deadline = time.monotonic() + 15
            while done[0] < 8 and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.2)  # the last acks
        calls = int(admin.info("commandstats")["cmdstat_evalsha"]["calls"]) - claims_before
    admin.close()
    assert done[0] == 8 and most[0] == 2
    # ~1 s of work: 8 claims, 8 acks and the pops the acks' rings wake; a pop loop spinning
    # while held back would make thousands.
    assert calls < 200, calls
