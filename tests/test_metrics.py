"""dynoqueue.metrics on a real redis-server: the counters move by exactly the operations done
(sync and asyncio), the scrape-time gauges equal shard_sizes(), a scrape of 100 queues x 3
shards costs a fixed number of round trips, the exposition carries the documented names."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from dynoqueue import (
    AccessDeniedError,
    CallTimeoutError,
    InvalidArgumentError,
    Message,
    QueuePolicy,
    RedisQueues,
    StaticShardSupplier,
    Worker,
)
from dynoqueue.asyncio import RedisQueues as AsyncRedisQueues
from dynoqueue.embedded import RedisServer, free_port
from dynoqueue.metrics import (
    QueueMetrics,
    QueueStats,
    QueueStatsCollector,
    ReadCost,
    WorkerMetrics,
    read_stats,
    read_stats_async,
    start_http_server,
)
from dynoqueue.metrics import names as metric_names

SHARDS = ["a", "b", "c"]
DOCS = Path(__file__).resolve().parent.parent / "docs" / "operations.md"


@pytest.fixture
def queues(redis_server: RedisServer, prefix: str) -> Iterator[RedisQueues]:
    with RedisQueues.from_url(redis_server.url, zones=SHARDS, local_zone="a", key_prefix=prefix,
                              unack_handler_interval_ms=0) as factory:
        yield factory


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    found = registry.get_sample_value(name, labels)
    return 0.0 if found is None else found


def counts(registry: CollectorRegistry, queue: str) -> dict[str, float]:
    return {kind: value(registry, f"{name}_total", queue=queue)
            for kind, name in metric_names.COUNTERS.items()}


def test_counters_move_by_exactly_the_operations_done(queues: RedisQueues) -> None:
    registry = CollectorRegistry()
    QueueMetrics(registry).observe(queues)
    q = queues.get("orders", QueuePolicy(max_deliveries=2))
    other = queues.get("other")
    assert q.push([Message(f"m{i}", "x") for i in range(6)]) == [f"m{i}" for i in range(6)]
    assert q.push([Message("m0", "dup"), Message("m9", "new")], if_exists="keep") == ["m9"]
    other.push([Message("o1", "x")])
    assert counts(registry, "orders")["pushed"] == 7
    assert counts(registry, "other")["pushed"] == 1

    leased = q.unsafe_pop_all_shards(4)
    assert len(leased) == 4
    assert q.ack(leased[0].id, receipt=leased[0].receipt)
    assert q.ack_many([leased[1]]) == 1
    assert not q.ack("never-pushed")
    assert q.nack(leased[2].id, 0)  # due again, first of two deliveries
    assert q.dead_letter(leased[3].id, "poison")
    c = counts(registry, "orders")
    assert (c["delivered"], c["acked"], c["nacked"], c["dead_lettered"]) == (4, 2, 1, 1)

    again = q.pop_with_msg_id(leased[2].id) or q.unsafe_pop_with_msg_id_all_shards(leased[2].id)
    assert again is not None and again.deliveries == 2
    assert q.nack(again.id, 0)  # its last allowed delivery: dead-lettered, not nacked
    c = counts(registry, "orders")
    assert (c["delivered"], c["nacked"], c["dead_lettered"]) == (5, 1, 2)



def test_expired_lease_put_back_counts_as_redelivered(redis_server: RedisServer,
                                                      prefix: str) -> None:
    registry = CollectorRegistry()
    with RedisQueues.from_url(redis_server.url, key_prefix=prefix,
                              unack_handler_interval_ms=0) as factory:  # one shard
        QueueMetrics(registry).observe(factory)
        q = factory.get("short")
        q.push([Message("s1", "x"), Message("s2", "x")])
        assert len(q.pop(2, lease_ms=1)) == 2
        time.sleep(0.01)
        assert q.process_unacks() == 2
    c = counts(registry, "short")
    assert (c["delivered"], c["redelivered"]) == (2, 2)


def test_expired_messages_are_counted(queues: RedisQueues) -> None:
    registry = CollectorRegistry()
    QueueMetrics(registry).observe(queues)
    q = queues.get("ttl")
    q.push([Message("t1", "x", ttl_ms=1), Message("t2", "x", ttl_ms=1), Message("t3", "x")])
    time.sleep(0.02)
    q.process_unacks()  # the lifecycle sweep ends them
    assert counts(registry, "ttl")["expired"] == 2


def test_async_api_counts_the_same(redis_server: RedisServer, prefix: str) -> None:
    registry = CollectorRegistry()

    async def main() -> None:
        async with AsyncRedisQueues.from_url(redis_server.url, key_prefix=prefix,
                                             unack_handler_interval_ms=0) as factory:
            QueueMetrics(registry).observe(factory)
            q = factory.get("jobs")
            await q.push([Message(f"j{i}", "x") for i in range(3)])
            got = await q.pop(3, 1000)
            assert await q.ack_many(got[:2]) == 2
            assert await q.nack(got[2].id, 5000)

    asyncio.run(main())
    c = counts(registry, "jobs")
    assert (c["pushed"], c["delivered"], c["acked"], c["nacked"]) == (3, 3, 2, 1)


T0 = 1_700_000_000_000  # the injected clock's start, epoch ms


def _lateness(registry: CollectorRegistry, queue: str) -> tuple[float, float]:
    return (value(registry, f"{metric_names.LATENESS}_count", queue=queue),
            value(registry, f"{metric_names.LATENESS}_sum", queue=queue))


async def _late_pops(q: Any, strict: Any, clock: list[int], done: Any) -> None:
    """One body for both APIs (``done`` awaits a sync call's result or an async call): pops
    of every kind, each delivery ``clock`` ms after its message fell due."""
    await done(q.push([Message("now", "x"), Message("soon", "x", timeout=1000),
                       Message("urgent", "x", priority=5), Message("later", "x", timeout=9000)]))
    clock[0] = T0 + 2500
    got = await done(q.pop(10, 0))  # late by 2500, 1500, 2500 (the priority is not time)
    assert sorted(m.id for m in got) == ["now", "soon", "urgent"]
    assert await done(q.nack("now", 200))  # due again at T0 + 2700
    clock[0] = T0 + 3700
    again = await done(q.unsafe_pop_with_msg_id_all_shards("now"))  # 1000 late
    assert again is not None and again.deliveries == 2
    clock[0] = T0 + 9100
    assert await done(q.pop_msg_with_predicate("x")) is not None  # "later": 100 late
    await done(strict.push([Message("p9", "x", priority=9), Message("p1", "x", priority=1)]))
    clock[0] = T0 + 9400
    # Strict priority: both wait in the ready zset, scored priority * 2**42 + due ms.
    assert [m.id for m in await done(strict.pop(2, 0))] == ["p1", "p9"]


#: (count, sum in s) of the deliveries of _late_pops: 2500 + 1500 + 2500 + 1000 + 100 ms, and
#: 300 ms twice on the strict queue.
LATE_POPS = (5, 7.6), (2, 0.6)


@pytest.mark.parametrize("api", ["sync", "async"])
def test_lateness_histogram_counts_every_pop(redis_server: RedisServer, prefix: str,
                                             api: str) -> None:
    registry = CollectorRegistry()
    clock = [T0]
    options: dict[str, Any] = {"key_prefix": prefix, "unack_handler_interval_ms": 0,
                               "clock": lambda: clock[0]}  # one shard

    async def value_of(result: Any) -> Any:
        return await result if api == "async" else result

    async def main() -> None:
        if api == "sync":
            with RedisQueues.from_url(redis_server.url, **options) as factory:
                QueueMetrics(registry).observe(factory)
                await _late_pops(factory.get("late"), factory.get(
                    "late-strict", QueuePolicy(strict_priority=True)), clock, value_of)
        else:
            async with AsyncRedisQueues.from_url(redis_server.url, **options) as factory:
                QueueMetrics(registry).observe(factory)
                await _late_pops(factory.get("late"), factory.get(
                    "late-strict", QueuePolicy(strict_priority=True)), clock, value_of)

    asyncio.run(main())
    (count, total), (strict_count, strict_total) = LATE_POPS
    assert counts(registry, "late")["delivered"] == count
    assert _lateness(registry, "late") == (count, pytest.approx(total))
    assert _lateness(registry, "late-strict") == (strict_count, pytest.approx(strict_total))
    # Every delivery is in a bucket: 100 ms in the 0.1 s bucket, the rest above 0.25 s.
    assert value(registry, f"{metric_names.LATENESS}_bucket", queue="late", le="0.1") == 1


def test_collector_equals_shard_sizes_and_camellia_buckets(queues: RedisQueues) -> None:
    q = queues.get("mixed")
    minute = 60_000
    delays = {"r1": 0, "r2": 0, "r3": 0, "r4": 0, "d30s": 30_000, "d5m": 5 * minute,
              "d20m": 20 * minute, "d45m": 45 * minute, "d2h": 120 * minute,
              "d10h": 600 * minute, "d3d": 3 * 1440 * minute, "d10d": 10 * 1440 * minute,
              "d40d": 40 * 1440 * minute}
    q.push([Message(i, "x", timeout=d) for i, d in delays.items()])
    leased = q.unsafe_pop_all_shards(2)
    assert len(leased) == 2
    q.push([Message("gone", "x")])
    popped = q.pop_with_msg_id("gone") or q.unsafe_pop_with_msg_id_all_shards("gone")
    assert popped is not None
    assert q.dead_letter("gone", "test")
    time.sleep(0.05)  # the ready ones age a little

    cost = ReadCost()
    (stats,) = read_stats(queues, ["mixed"], cost)
    sizes = q.shard_sizes()
    for shard in stats.shards:
        assert shard.waiting == sizes[shard.shard]["size"]
        assert shard.leased == sizes[shard.shard]["uacked"]
        assert shard.ready + shard.delayed == shard.waiting
        assert sum(shard.waiting_buckets.values()) == shard.delayed
    assert stats.total("ready") == 2 and stats.total("leased") == 2
    assert stats.total("delayed") == 9
    assert stats.dead == q.dead_size() == 1
    assert 50 <= stats.oldest_ready_age_ms < 10_000
    assert stats.buckets() == {
        "sizeOf0To1min": 1, "sizeOf1minTo10min": 1, "sizeOf10minTo30min": 1,
        "sizeOf30minTo1hour": 1, "sizeOf1hourTo6hour": 1, "sizeOf6hourTo1day": 1,
        "sizeOf1dayTo7day": 1, "sizeOf7dayTo30day": 1, "sizeOf30dayToInfinite": 1}
    assert cost.round_trips == 2  # TIME and the policies, then one pipeline

    # The collector's exposition carries the same numbers under the documented names.
    registry = CollectorRegistry()
    registry.register(QueueStatsCollector(queues, ["mixed"]))
    for shard in stats.shards:
        labels = {"queue": "mixed", "shard": shard.shard}
        assert value(registry, metric_names.WAITING, **labels) == sizes[shard.shard]["size"]
        assert value(registry, metric_names.LEASED, **labels) == sizes[shard.shard]["uacked"]
        assert value(registry, metric_names.READY, **labels) == shard.ready
    assert value(registry, metric_names.DEAD, queue="mixed") == 1
    total_40d = sum(value(registry, metric_names.WAITING_TIME, queue="mixed", shard=s,
                          range="30dayToInfinite") for s in SHARDS)
    assert total_40d == 1


def test_scrape_of_100_queues_by_3_shards_costs_bounded_round_trips(
        redis_server: RedisServer, prefix: str) -> None:
    with RedisQueues(redis_server.client(), redis_server.client(), key_prefix=prefix,
                     shard_supplier=StaticShardSupplier(SHARDS, "a"),
                     unack_handler_interval_ms=0) as factory:
        for i in range(100):
            q = factory.get(f"q{i:03d}")
            q.push([Message(f"m{j}", "x", timeout=j * 1000) for j in range(3)])
        assert q.size() == 3  # both clients connected: their set-up commands are not counted
        probe = redis_server.client()
        before = probe.info("commandstats")
        cost = ReadCost()
        stats = read_stats(factory, None, cost)  # lists every queue with SCAN, then reads
        after = probe.info("commandstats")
        sent = {name.removeprefix("cmdstat_"): after[name]["calls"] - before.get(
            name, {"calls": 0})["calls"] for name in after}
        assert [s.queue for s in stats] == [f"q{i:03d}" for i in range(100)]
        assert all(s.total("waiting") == 3 for s in stats)
        scans = cost.round_trips - 3  # beside the two pipelines, the registry's SMEMBERS
        assert 1 <= scans <= 1 + int(probe.dbsize()) // 1000 + 1
        # SMEMBERS; TIME; per queue its policy and schedules, its dead letters, limited and
        # pause flag ...
        assert cost.commands == scans + 1 + 1 + 100 * (2 + 3 + 3 * 13)
        # What Redis counted, beside the probe's own INFO (and a connection's HELLO).
        assert {k: v for k, v in sent.items() if v and k not in ("info", "hello")} == {
            "scan": scans, "smembers": 1, "time": 1, "get": 200, "hgetall": 100, "exists": 100,
            "zcard": 100 * (1 + 3 * 2),
            "zrange": 100 * 3,
            "zcount": 100 * 3 * 10}
        print(f"\nscrape of 100 queues x 3 shards: {cost.round_trips} round trips "
              f"({scans} SCAN), {cost.commands} commands, {cost.seconds * 1000:.1f} ms")


def test_async_read_equals_sync_read(queues: RedisQueues, redis_server: RedisServer) -> None:
    q = queues.get("twin")
    q.push([Message(f"m{i}", "x", timeout=i * 90_000) for i in range(5)])
    (sync_stats,) = read_stats(queues, ["twin"])

    async def main() -> None:
        async with AsyncRedisQueues.from_url(redis_server.url, zones=SHARDS, local_zone="a",
                                             key_prefix=queues.key_prefix,
                                             unack_handler_interval_ms=0) as factory:
            (async_stats,) = await read_stats_async(factory, ["twin"])
            assert [(s.waiting, s.ready, s.delayed, s.waiting_buckets)
                    for s in async_stats.shards] == [
                (s.waiting, s.ready, s.delayed, s.waiting_buckets) for s in sync_stats.shards]
            assert "twin" in [s.queue for s in await read_stats_async(factory)]

    asyncio.run(main())


def test_worker_metrics_time_every_handler(redis_server: RedisServer, prefix: str) -> None:
    registry = CollectorRegistry()
    hooks = WorkerMetrics("work", registry)

    def handle(message: Message) -> None:
        time.sleep(0.01)

    with RedisQueues.from_url(redis_server.url, key_prefix=prefix,
                              unack_handler_interval_ms=0) as factory:  # one shard
        QueueMetrics(registry).observe(factory)
        q = factory.get("work")
        q.push([Message(f"w{i}", "x") for i in range(3)])
        with Worker(q, handle, concurrency=2, hooks=hooks):
            deadline = time.monotonic() + 10
            while value(registry, f"{metric_names.HANDLER_OUTCOMES}_total", queue="work",
                        outcome="acked") < 3 and time.monotonic() < deadline:
                time.sleep(0.02)
    assert value(registry, f"{metric_names.HANDLER_DURATION}_count", queue="work") == 3
    assert value(registry, f"{metric_names.HANDLER_DURATION}_sum", queue="work") >= 0.03
    assert WorkerMetrics("work", registry).duration is hooks.duration  # shared per registry
    # A Worker's pops feed the lateness histogram like any pop: once per delivery.
    delivered = counts(registry, "work")["delivered"]
    assert delivered >= 3
    assert _lateness(registry, "work")[0] == delivered


def test_start_http_server_serves_counters_and_gauges(queues: RedisQueues) -> None:
    port = free_port()
    registry = CollectorRegistry()
    start_http_server(port, queues, registry=registry)
    q = queues.get("served")
    q.push([Message("a", "x"), Message("b", "x", timeout=90_000)])
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'dynoqueue_messages_pushed_total{queue="served"} 2.0' in text
    waiting = re.findall(r'dynoqueue_waiting_messages\{queue="served",shard="\w"\} (\S+)', text)
    assert sum(float(v) for v in waiting) == 2
    assert 'dynoqueue_delayed_messages_by_due_in{queue="served",range="1minTo10min",' in text \
        or 'range="1minTo10min"' in text
    assert "dynoqueue_scrape_round_trips" in text
    assert generate_latest(registry).decode().count("# TYPE dynoqueue_waiting_messages") == 1


def test_every_metric_name_is_in_the_docs_table() -> None:
    text = DOCS.read_text()
    documented = set(re.findall(r"^\| `(dynoqueue_\w+)`", text, re.MULTILINE))
    exposed = {f"{n}_total" for n in metric_names.COUNTERS.values()} | {
        metric_names.LATENESS, metric_names.HANDLER_DURATION,
        f"{metric_names.HANDLER_OUTCOMES}_total", metric_names.WAITING, metric_names.READY,
        metric_names.DELAYED, metric_names.LEASED, metric_names.DEAD,
        metric_names.OLDEST_READY_AGE, metric_names.WAITING_TIME,
        metric_names.SCRAPE_ROUND_TRIPS, metric_names.SCRAPE_DURATION, metric_names.PAUSED,
        f"{metric_names.EVICTED_KEYS}_total"}
    assert exposed == documented


@pytest.mark.deployments("single", "cluster", "partitioned")
@pytest.mark.parametrize("api", ["sync", "async"], indirect=True)
def test_queue_discovery_finds_a_queue_holding_only_dead_letters(deployment, prefix,
                                                                  api, bridge) -> None:
    opened = deployment.build(key_prefix=prefix, unack_handler_interval_ms=0, api=api,
                              bridge=bridge)
    try:
        q = opened.get("dead-only")
        q.push([Message("m")])
        (leased,) = q.unsafe_pop_all_shards(1)
        assert q.dead_letter(leased.id, "poison")
    finally:
        opened.close()
    fresh = deployment.build(key_prefix=prefix, unack_handler_interval_ms=0, api=api,
                             bridge=bridge)  # has opened no queue: only Redis can tell
    try:
        if api == "async":
            stats = bridge.call(read_stats_async(fresh._target))
        else:
            stats = read_stats(fresh)
        assert [(s.queue, s.dead, s.total("waiting")) for s in stats] == [("dead-only", 1, 0)]
    finally:
        fresh.close()


@pytest.mark.parametrize("api", ["sync", "async"])
def test_the_read_ends_at_the_call_deadline_as_a_typed_error(
        redis_server: RedisServer, prefix: str, api: str) -> None:
    """The read runs through the factory's driver: a stalled server ends it at the call's
    deadline (call_timeout_ms) with a CallTimeoutError, as a queue operation would."""
    admin = redis_server.client()

    def stalled(read: Any) -> float:
        assert read()[0].queue == "stalled"  # connected
        admin.execute_command("CLIENT", "PAUSE", 3000, "ALL")
        started = time.monotonic()
        try:
            with pytest.raises(CallTimeoutError) as caught:
                read()
            took = time.monotonic() - started
        finally:
            admin.execute_command("CLIENT", "UNPAUSE")  # (its client's health check waits)
        assert caught.value.operation == "stats"
        return took

    options: dict[str, Any] = {"key_prefix": prefix, "unack_handler_interval_ms": 0,
                               "call_timeout_ms": 1000}
    try:
        if api == "sync":
            with RedisQueues.from_url(redis_server.url, **options) as factory:
                took = stalled(lambda: read_stats(factory, ["stalled"]))
        else:
            async def main() -> float:
                async with AsyncRedisQueues.from_url(redis_server.url, **options) as factory:
                    loop = asyncio.get_running_loop()

                    def read() -> Any:
                        return asyncio.run_coroutine_threadsafe(
                            read_stats_async(factory, ["stalled"]), loop).result()

                    return await loop.run_in_executor(None, stalled, read)

            took = asyncio.run(main())
    finally:
        admin.close()
    assert 0.5 <= took < 2.5, took


def _read(api: str, url: str, prefix: str, names: list[str] | None) -> Any:
    """read_stats (or read_stats_async) through a new factory of ``api`` on ``url``."""
    if api == "sync":
        with RedisQueues.from_url(url, key_prefix=prefix, unack_handler_interval_ms=0) as queues:
            return read_stats(queues, names)

    async def main() -> Any:
        async with AsyncRedisQueues.from_url(url, key_prefix=prefix,
                                             unack_handler_interval_ms=0) as factory:
            return await read_stats_async(factory, names)

    return asyncio.run(main())


@pytest.mark.parametrize("api", ["sync", "async"])
def test_a_user_who_may_not_scan_gets_access_denied_when_listing(
        redis_server: RedisServer, prefix: str, api: str) -> None:
    """The listing's error is typed by the core's listing (not a raw redis-py error), and a
    read of named queues needs no SCAN."""
    user, password = f"u{uuid.uuid4().hex[:8]}", "pw-" + uuid.uuid4().hex[:8]
    admin = redis_server.client()
    try:
        admin.execute_command("ACL", "SETUSER", user, "on", f">{password}", "~*", "&*", "+@all",
                              "-scan")
    finally:
        admin.close()
    url = redis_server.url.replace("redis://", f"redis://{user}:{password}@")
    with pytest.raises(AccessDeniedError) as caught:
        _read(api, url, prefix, None)
    assert caught.value.operation == "stats"
    (stats,) = _read(api, url, prefix, ["named"])
    assert (stats.queue, stats.dead, stats.total("waiting")) == ("named", 0, 0)


def _still(stats: QueueStats) -> QueueStats:
    """``stats`` without the oldest ready ages, which grow between two reads (checked apart)."""
    return dataclasses.replace(
        stats, partitions=[_still(p) for p in stats.partitions],
        shards=[dataclasses.replace(s, oldest_ready_age_ms=0) for s in stats.shards])


def test_the_factory_stats_call_is_what_read_stats_returns_on_both_apis(
        queues: RedisQueues, redis_server: RedisServer) -> None:
    """RedisQueues.stats() and the asyncio factory's awaited stats() return what read_stats
    (and read_stats_async) return, for a plain queue and a partitioned one (its counts summed
    over its partitions), named or listed, at the same cost in round trips and commands."""
    names = ["plain", "split"]
    for name, policy in zip(names, [None, QueuePolicy(partitions=3)], strict=True):
        q = queues.get(name, policy)
        q.push([Message(f"r{i}", "x") for i in range(12)]  # ready
               + [Message(f"d{i}", "x", timeout=ms) for i, ms in enumerate(
                   [90_000, 3 * 3600_000, 2 * 86_400_000])])  # delayed, far from a bucket edge
        leased = q.unsafe_pop_all_shards(4)
        assert len(leased) == 4 and q.dead_letter(leased[0].id, "poison")
    expected = read_stats(queues, names)
    plain, split = expected
    assert not plain.partitions and [p.partition for p in split.partitions] == [0, 1, 2]
    assert ((split.total("waiting"), split.total("ready"), split.total("delayed"),
             split.total("leased"), split.dead)
            == (11, 8, 3, 3, 1)
            == (plain.total("waiting"), plain.total("ready"), plain.total("delayed"),
                plain.total("leased"), plain.dead))
    assert split.total("waiting") == sum(p.total("waiting") for p in split.partitions)
    assert split.policy == QueuePolicy(partitions=3) and plain.policy is None

    def same(found: list[QueueStats]) -> None:
        assert [_still(s) for s in found] == [_still(s) for s in expected]
        for got, want in zip(found, expected, strict=True):  # ready for a few ms: ages close
            assert 0 < want.oldest_ready_age_ms <= got.oldest_ready_age_ms < \
                want.oldest_ready_age_ms + 5_000

    costs = [ReadCost(), ReadCost()]
    same(queues.stats(names, cost=costs[0]))
    read_stats(queues, names, costs[1])
    # TIME, a policy and schedules per queue; 3 + 13 per shard for each of 4 partitions
    assert ((costs[0].round_trips, costs[0].commands)
            == (costs[1].round_trips, costs[1].commands) == (2, 1 + 2 * 2 + 4 * (3 + 13 * 3)))
    assert costs[0].seconds > 0
    same([s for s in queues.stats() if s.queue in names])  # listed: sorted, both found
    assert queues.stats([]) == []
    with pytest.raises(InvalidArgumentError):
        queues.stats("plain")

    async def main() -> None:
        async with AsyncRedisQueues.from_url(redis_server.url, zones=SHARDS, local_zone="a",
                                             key_prefix=queues.key_prefix,
                                             unack_handler_interval_ms=0) as factory:
            cost = ReadCost()
            same(await factory.stats(names, cost=cost))
            assert (cost.round_trips, cost.commands) == (costs[0].round_trips,
                                                        costs[0].commands)
            same(await read_stats_async(factory, names))
            same([s for s in await factory.stats() if s.queue in names])
            assert await factory.stats([]) == []
            with pytest.raises(InvalidArgumentError):
                await factory.stats("plain")

    asyncio.run(main())
