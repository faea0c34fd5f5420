"""What only the asyncio API has: cancellation, many waiters on one pool, close while waiting,
the reprocessor task, and sharing a queue with the sync API (real redis-server, no mocks).

The contract suite (test_queue_api, test_bad_input, test_concurrency, test_state_machine) runs
every public call on both APIs; this file covers the asyncio-only behaviour.
"""

from __future__ import annotations

import asyncio
import gc
import time
import uuid
from typing import Any

import pytest
import redis
import redis.asyncio
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from dynoqueue import (
    ConfigurationError,
    DynoQueueError,
    Message,
    QueueClosedError,
    QueuePolicy,
    RedisOperationError,
    SingleShardSupplier,
    StaticShardSupplier,
)
from dynoqueue import RedisQueues as SyncRedisQueues
from dynoqueue.asyncio import DynoQueue, RedisQueues
from dynoqueue.embedded import SentinelRing

from .conftest import unique


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture(params=[1, 4], ids=["one-partition", "4-partitions"])
def layout(request: pytest.FixtureRequest) -> QueuePolicy | None:
    """The factory policy of the tests that run on a partitioned queue too (their
    cancellations, closes and waiting pops go over every partition)."""
    return QueuePolicy(partitions=request.param) if request.param > 1 else None


def test_a_cancelled_waiting_pop_puts_back_what_it_leased(redis_server, prefix, layout) -> None:
    async def scenario() -> None:
        async with RedisQueues.from_url(redis_server.url, key_prefix=prefix, policy=layout,
                                        unack_handler_interval_ms=0,
                                        unack_timeout_ms=60_000) as queues:
            q = queues.get(unique())
            await q.push([Message("m1"), Message("m2")])
            with pytest.raises(TimeoutError):  # claims both, then waits for a third
                await asyncio.wait_for(q.pop(3, wait_ms=10_000), timeout=0.5)
            assert await q.shard_sizes() == {"a": {"size": 2, "uacked": 0}}
            again = await q.pop(3)  # due at once, not after the 60 s lease
            assert sorted(m.id for m in again) == ["m1", "m2"]

    run(scenario())


def test_task_cancel_of_a_waiting_pop_raises_cancelled_and_strands_nothing(
        redis_server, prefix, layout) -> None:
    async def scenario() -> None:
        async with RedisQueues.from_url(redis_server.url, key_prefix=prefix, policy=layout,
                                        unack_handler_interval_ms=0) as queues:
            q = queues.get(unique())
            await q.push([Message("only")])
            task = asyncio.create_task(q.pop(2, wait_ms=10_000))
            await asyncio.sleep(0.3)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert (await q.shard_sizes())["a"] == {"size": 1, "uacked": 0}

    run(scenario())


def test_many_waiting_pops_share_one_pool_without_blocking_the_loop(redis_server, prefix,
                                                                 layout) -> None:
    async def scenario() -> None:
        async with RedisQueues.from_url(redis_server.url, key_prefix=prefix, policy=layout,
                                        unack_handler_interval_ms=0) as queues:
            q = queues.get(unique())
            ticks = 0

            async def ticker() -> None:
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.01)
                    ticks += 1

            beat = asyncio.create_task(ticker())
            waiters = [asyncio.create_task(q.pop(1, wait_ms=8_000)) for _ in range(50)]
            await asyncio.sleep(0.5)
            assert ticks >= 10  # 50 waiting pops leave the loop free (~50 ticks expected)
            await q.push([Message(f"m{i}") for i in range(50)])
            got = await asyncio.wait_for(asyncio.gather(*waiters), timeout=10)
            beat.cancel()
            ids = [m.id for batch in got for m in batch]
            assert sorted(ids) == sorted(f"m{i}" for i in range(50))  # each exactly once

    run(scenario())


def test_concurrent_pushes_join_into_few_script_calls_each_with_its_own_result(
        redis_server, prefix) -> None:
    """Pushes awaited at the same moment go out as one push script call (auto-pipelining joins
    them); every caller still gets exactly its own answer: keep-mode pushes of one id from
    several tasks report it pushed once, the others' flags are their own."""
    raw = redis.Redis.from_url(redis_server.url)

    async def scenario() -> None:
        async with RedisQueues.from_url(redis_server.url, key_prefix=prefix,
                                        unack_handler_interval_ms=0) as queues:
            q = queues.get(unique())
            await q.push([Message("warm-up")])  # connect and load the scripts first
            raw.config_resetstat()
            results = await asyncio.gather(
                *(q.push([Message(f"m{i}", str(i))]) for i in range(50)),
                *(q.push([Message("same", str(i))], if_exists="keep") for i in range(10)),
                q.push([Message("pair1"), Message("pair2")]),
                q.push([Message("m0", "again")], if_exists="keep"))
            calls = raw.info("commandstats")["cmdstat_evalsha"]["calls"]
            assert calls < 10  # 62 pushes, joined
            assert results[:50] == [[f"m{i}"] for i in range(50)]
            assert sorted(map(len, results[50:60])) == [0] * 9 + [1]  # first wins, once
            assert results[60] == ["pair1", "pair2"]
            assert results[61] == []  # m0 was pushed by an earlier call of the batch
            assert await q.size() == 54
            kept = await q.get("same")
            assert kept is not None and results[50 + int(kept.payload)] == ["same"]

    run(scenario())
    raw.close()


def test_a_finished_batch_is_let_go_before_the_callers_make_the_next(redis_server,
                                                                     prefix) -> None:
    """Once a caller has its reply, nothing of the batcher holds that call (and its command's
    args: a 500-message push's JSON) any more: the flusher used to keep the finished batch
    through its loop turn, so every push built the next batch in fresh memory (~1 us per
    message slower than the sync API's batched push)."""
    from dynoqueue.io.batching import BatchedCall

    def live_calls_of(marker: str) -> list[Any]:
        return [o for o in gc.get_objects() if type(o) is BatchedCall
                and any(marker.encode() in a for a in o.command.args if type(a) is bytes)]

    async def scenario() -> None:
        async with RedisQueues.from_url(redis_server.url, key_prefix=prefix,
                                        unack_handler_interval_ms=0) as queues:
            q = queues.get(unique())
            await q.push([Message("warm-up")])
            for n in (1, 500):
                marker = f"kept-{n}-{uuid.uuid4().hex}"
                await q.push([Message(f"{marker}-{i}", marker) for i in range(n)])
                # The flusher task still waits for its next loop turn here.
                assert live_calls_of(marker) == []
            assert await q.size() == 502

    run(scenario())

def test_one_message_pushes_that_fail_on_the_wire_end_as_the_operation_decides(
        redis_server, prefix) -> None:
    """A push sent as its command alone (a CommandOp: AsyncDriver.run) whose batch fails hands the
    error to push's operation: NOSCRIPT after SCRIPT FLUSH sends the script's text, a killed
    connection is retried by the connection's Retry, or without retries raises
    RedisOperationError with nothing stored (or, where the parser saw the close first, goes
    through on a new connection); the next pushes go through again."""
    raw = redis.Redis.from_url(redis_server.url)

    async def pushes(q: DynoQueue, tag: str, n: int = 20) -> list[Any]:
        return list(await asyncio.gather(*(q.push([Message(f"{tag}{i}")]) for i in range(n)),
                                         return_exceptions=True))

    async def scenario() -> None:
        async with RedisQueues.from_url(redis_server.url, key_prefix=prefix,
                                        unack_handler_interval_ms=0) as queues:
            q = queues.get(unique())
            await q.push([Message("warm-up")])  # connected, first-call checks done
            raw.script_flush()
            assert await pushes(q, "s") == [[f"s{i}"] for i in range(20)]
            raw.client_kill_filter(_type="normal", skipme=True)
            assert await pushes(q, "k") == [[f"k{i}"] for i in range(20)]
            assert await q.size() == 41
        no_retry = redis.asyncio.Redis.from_url(redis_server.url, retry=Retry(NoBackoff(), 0))
        async with RedisQueues(no_retry, no_retry, key_prefix=prefix,
                               shard_supplier=SingleShardSupplier("a"),
                               unack_handler_interval_ms=0) as queues:
            q = queues.get(unique())
            await q.push([Message("warm-up")])
            raw.client_kill_filter(_type="normal", skipme=True)
            # Whether the client sees the closed connection before it writes (it then opens a
            # new one: redis-py's Python parser reads the EOF first) or only at the read (a
            # failed batch, not retried) depends on the parser: each push either went through
            # or raised RedisOperationError with nothing stored.
            outcomes = await pushes(q, "f")
            stored = [r for r in outcomes if not isinstance(r, RedisOperationError)]
            assert all(r == [f"f{i}"] for i, r in enumerate(outcomes) if r in stored), outcomes
            assert await q.size() == 1 + len(stored)
            assert await pushes(q, "n") == [[f"n{i}"] for i in range(20)]
            assert await q.size() == 21 + len(stored)
        await no_retry.aclose()

    run(scenario())
    raw.close()


def test_cancelled_pushes_neither_lose_nor_stall_the_pushes_joined_with_them(
        redis_server, prefix) -> None:
    """Pushes cancelled after they were handed to the batch still go out with it: the
    cancelled callers get CancelledError, the others their ids, and every message is
    stored (none half-written, none dropped from the joined script call)."""
    async def scenario() -> None:
        async with RedisQueues.from_url(redis_server.url, key_prefix=prefix,
                                        unack_handler_interval_ms=0) as queues:
            q = queues.get(unique())
            await q.push([Message("warm-up")])
            tasks = [asyncio.create_task(q.push([Message(f"m{i}")])) for i in range(40)]
            await asyncio.sleep(0)  # each task has handed its push to the batcher
            for task in tasks[::2]:
                task.cancel()
            results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True),
                                             timeout=5)  # under call_timeout_ms: no retries
            for i, result in enumerate(results):
                if i % 2:
                    assert result == [f"m{i}"]
                else:
                    assert isinstance(result, asyncio.CancelledError)
            assert await q.size() == 41
            assert sorted(m.id for m in await q.pop(50)) == sorted(
                ["warm-up", *(f"m{i}" for i in range(40))])

    run(scenario())


def test_close_while_pops_wait_returns_them_and_acks_still_work(redis_server, prefix,
                                                                 layout) -> None:
    async def scenario() -> None:
        queues = RedisQueues.from_url(redis_server.url, key_prefix=prefix, policy=layout,
                                      unack_handler_interval_ms=0)
        q = queues.get(unique())
        await q.push([Message("in-hand")])
        (held,) = await q.pop(1)
        waiters = [asyncio.create_task(q.pop(1, wait_ms=10_000)) for _ in range(3)]
        await asyncio.sleep(0.3)
        started = time.monotonic()
        await q.close()
        assert await asyncio.wait_for(asyncio.gather(*waiters), timeout=3) == [[], [], []]
        assert time.monotonic() - started < 2.0
        with pytest.raises(QueueClosedError):
            await q.pop(1)
        assert await q.ack(held.id)  # the message in hand is acked, not redelivered
        await queues.aclose()
        with pytest.raises(QueueClosedError):
            await q.ack("any")

    run(scenario())


def test_the_reprocessor_task_survives_redis_errors(redis_server, prefix, caplog) -> None:
    client = redis_server.client()

    async def scenario() -> None:
        async with RedisQueues.from_url(redis_server.url, key_prefix=prefix,
                                        unack_handler_interval_ms=30,
                                        unack_timeout_ms=30) as queues:
            broken = queues.get("broken")
            client.set(broken.keys.unack_shard("a"), "not a zset")  # every pass of it fails
            good = queues.get("good")
            await good.push([Message("m")])
            assert [m.id for m in await good.pop(1)] == ["m"]
            deadline = time.monotonic() + 5
            while await good.size() != 1 and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            assert await good.size() == 1  # put back by the task despite the broken queue

    run(scenario())
    assert "unack processing failed for queue broken" in caplog.text


def test_sync_and_async_clients_share_a_queue(redis_server, prefix, layout) -> None:
    name = unique()
    with SyncRedisQueues.from_url(redis_server.url, key_prefix=prefix, policy=layout,
                                  unack_handler_interval_ms=0) as sync_queues:
        sync_q = sync_queues.get(name)
        sync_q.push([Message("from-sync", "s", priority=3)])

        async def scenario() -> None:
            async with RedisQueues.from_url(redis_server.url, key_prefix=prefix, policy=layout,
                                            unack_handler_interval_ms=0) as queues:
                q = queues.get(name)
                (m,) = await q.pop(1)
                assert (m.id, m.payload, m.priority) == ("from-sync", "s", 3)
                assert await q.ack(m.id)
                await q.push([Message("from-async", "a")])

        run(scenario())
        assert [m.id for m in sync_q.pop(1)] == ["from-async"]


def test_a_sync_client_is_refused(redis_server, prefix) -> None:
    client = redis.Redis(port=redis_server.port)
    with pytest.raises(ConfigurationError, match=r"redis\.asyncio"):
        RedisQueues(client, client, key_prefix=prefix, shard_supplier=SingleShardSupplier("a"))
    client.close()


def test_ping_checks_every_connection(redis_server, prefix) -> None:
    async def scenario() -> None:
        async with RedisQueues.from_url(redis_server.url, key_prefix=prefix,
                                        unack_handler_interval_ms=0) as queues:
            times = await queues.ping()
            assert set(times) == {"quorum", "non_quorum", "doorbell"}
            assert all(0 <= ms < 5_000 for ms in times.values())

    run(scenario())


def test_the_factory_hands_out_asyncio_queues(redis_server, prefix) -> None:
    async def scenario() -> None:
        queues = RedisQueues.from_url(redis_server.url, key_prefix=prefix,
                                      shard_supplier=StaticShardSupplier(["a", "b"], "b"),
                                      unack_handler_interval_ms=0)
        q = queues.get("x")
        assert isinstance(q, DynoQueue) and queues.get("x") is q
        assert (q.shards, q.local_shard) == (["a", "b"], "b")
        assert asyncio.iscoroutinefunction(q.pop) and "lease" in (q.pop.__doc__ or "")
        await queues.aclose()
        await queues.aclose()  # idempotent

    run(scenario())


@pytest.mark.slow
def test_async_pushes_follow_a_sentinel_failover_and_lose_nothing_acknowledged() -> None:
    """The asyncio driver's own paths (auto-pipelined scripts, pipelines with WAIT) retry
    through a primary's SIGKILL and follow the new primary, as the sync fault test shows."""
    safe = ["--min-replicas-to-write", "1", "--min-replicas-max-lag", "10"]
    zones = ["us-east-1a", "us-east-1b", "us-east-1c"]
    acknowledged: list[str] = []
    errors: list[BaseException] = []
    with SentinelRing(zones, extra_args=safe, down_after_ms=1000) as ring:
        prefix = f"af{uuid.uuid4().hex[:8]}"

        async def scenario() -> float:
            async with RedisQueues.from_url(ring.url, key_prefix=prefix, write_quorum=1,
                                            write_quorum_timeout_ms=500,
                                            unack_handler_interval_ms=0) as queues:
                q = queues.get("load")
                stop = asyncio.Event()

                async def produce(k: int) -> None:
                    i = 0
                    while not stop.is_set():
                        mid = f"p{k}.{i}"
                        i += 1
                        try:
                            await q.push([Message(mid)])
                            acknowledged.append(mid)
                        except DynoQueueError as exc:
                            errors.append(exc)
                            await asyncio.sleep(0.05)

                producers = [asyncio.create_task(produce(k)) for k in range(10)]
                await asyncio.sleep(0.5)
                old = ring.current_primary()
                killed_at = len(acknowledged)
                old.kill()
                await asyncio.to_thread(ring.wait_for_new_primary, old, 30)
                await asyncio.sleep(1.0)
                stop.set()
                await asyncio.gather(*producers)
                return killed_at

        killed_at = asyncio.run(scenario())
        with SyncRedisQueues.from_url(ring.url, key_prefix=prefix, read_from_replicas=False,
                                      unack_handler_interval_ms=0) as sync_queues:
            stored = {m.id for m in sync_queues.get("load").get_all_messages()}
    assert len(acknowledged) > killed_at + 10  # pushes went on after the failover
    assert set(acknowledged) <= stored, sorted(set(acknowledged) - stored)[:10]
    assert all(isinstance(e, DynoQueueError) for e in errors)


def test_every_call_works_without_hiredis_packing(redis_server, prefix, monkeypatch) -> None:
    """``pip install dynoqueue`` has no hiredis: redis.asyncio's own packer returns a list of
    chunks, which the batcher's writer must get as one bytes object (it raised TypeError on
    every call). The minimal-install CI run covers the rest of the suite without hiredis."""
    from dynoqueue.io import common

    monkeypatch.setattr(common, "_hiredis_pack", None)

    async def scenario() -> None:
        async with RedisQueues.from_url(redis_server.url, key_prefix=prefix,
                                        unack_handler_interval_ms=0) as queues:
            q = queues.get(unique())
            assert await q.push([Message("a", payload="é" * 3), Message("b")]) == ["a", "b"]
            got = await asyncio.gather(*(q.push([Message(f"m{i}")]) for i in range(20)))
            assert got == [[f"m{i}"] for i in range(20)]
            popped = await q.pop(30, wait_ms=1000, min_count=22)
            assert len(popped) == 22
            assert await asyncio.gather(*(q.ack(m.id) for m in popped)) == [True] * 22
            assert await q.size() == 0

    run(scenario())


@pytest.mark.deployments("single", "cluster")
@pytest.mark.parametrize("policy", [None, QueuePolicy(max_deliveries=5), QueuePolicy(partitions=4)],
                         ids=["plain", "policy", "4-partitions"])
def test_200_waiting_pops_get_every_message_and_close_releases_them(deployment, prefix,
                                                                     policy) -> None:
    """A waiting pop needs no connection of its own while it waits: 200 of them on one queue
    wake and claim together (a Cluster client fails a command at once when a node has its
    max_connections in use: 101 pops failed and 99 messages stayed behind), then a close
    while others wait releases them and leaves no task behind."""
    async def scenario() -> tuple[list[str], list[object], list[str]]:
        queues = RedisQueues.from_url(deployment.url, key_prefix=prefix, policy=policy,
                                      read_from_replicas=False, unack_handler_interval_ms=0)
        q = queues.get(unique())
        pops = [asyncio.create_task(q.pop(1, wait_ms=8000)) for _ in range(200)]
        await asyncio.sleep(0.5)
        await q.push([Message(f"m{i}") for i in range(200)])
        got = await asyncio.gather(*pops, return_exceptions=True)
        errors = [g for g in got if isinstance(g, BaseException)]
        ids = sorted(m.id for batch in got if isinstance(batch, list) for m in batch)
        waiting = [asyncio.create_task(q.pop(1, wait_ms=20_000)) for _ in range(50)]
        await asyncio.sleep(0.3)
        await queues.aclose()
        after = await asyncio.wait_for(asyncio.gather(*waiting), 5)
        left = [t.get_name() for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        return ids, [*errors, *(a for a in after if a != [])], left

    ids, errors, left = run(scenario())
    assert errors == []
    assert ids == sorted(f"m{i}" for i in range(200))
    assert left == []
