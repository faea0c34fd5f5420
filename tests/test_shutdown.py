"""Nothing a factory started outlives its ``close()`` / ``aclose()``, and a clean shutdown logs
no error: waiting pops and a Worker's pop in progress when the factory closes, on the caller's
own clients (which stay open) and on a builder's (which the close shuts), in both APIs."""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections.abc import Iterator

import pytest
import redis
import redis.asyncio

from dynoqueue import Message, RedisQueues, Worker
from dynoqueue.asyncio import RedisQueues as AsyncRedisQueues
from dynoqueue.asyncio import Worker as AsyncWorker
from dynoqueue.embedded import RedisServer
from dynoqueue.model.sharding import SingleShardSupplier

from .conftest import unique


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer() as started:
        yield started


def _errors(caplog: pytest.LogCaptureFixture, server: RedisServer) -> list[str]:
    """This test's dynoqueue warnings and errors. A record naming another server's address is
    another test's (a test process runs many modules: a factory an earlier test left open keeps
    retrying its stopped server from its own thread, and the capture sees every thread)."""
    # Another server's address, or a key under the default prefix (this module's factories
    # all use prefixes of their own).
    others = re.compile(rf"127\.0\.0\.1:(?!{server.port}\b)\d+|\bdynoqueue\.[A-Z]")
    return [f"{r.name}: {r.getMessage()}" for r in caplog.records
            if r.name.startswith("dynoqueue") and r.levelno >= logging.WARNING
            and not others.search(r.getMessage())]


def _ours() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("dynoqueue")]


def test_async_waiting_pops_leave_no_task_after_aclose(server: RedisServer,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> tuple[list[object], list[str]]:
        client = redis.asyncio.Redis.from_url(server.url)
        queues = AsyncRedisQueues(client, client, key_prefix=unique("shut"),
                                  shard_supplier=SingleShardSupplier("a"))
        queue = queues.get("jobs")
        pops = [asyncio.create_task(queue.pop(1, wait_ms=20_000)) for _ in range(5)]
        await asyncio.sleep(0.5)  # all five subscribed and waiting
        await queues.aclose()
        results = await asyncio.wait_for(asyncio.gather(*pops), 5)
        left = [t.get_name() for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        await client.aclose()  # the caller's client: the factory left it open
        await asyncio.sleep(0.3)  # a listener left behind would now log its lost subscription
        return results, left

    started = time.monotonic()
    results, left = asyncio.run(main())  # a leftover task would hang run()'s final cancellation
    assert results == [[]] * 5
    assert left == []
    assert time.monotonic() - started < 10
    assert _errors(caplog, server) == []


@pytest.mark.parametrize("own_clients", [True, False], ids=["callers-clients", "from-url"])
def test_a_worker_stopped_then_its_factory_closed_leaves_no_thread(
        server: RedisServer, caplog: pytest.LogCaptureFixture, own_clients: bool) -> None:
    before = _ours()
    client = redis.Redis.from_url(server.url)
    prefix = unique("shut")
    queues = (RedisQueues(client, client, key_prefix=prefix,
                          shard_supplier=SingleShardSupplier("a"), unack_handler_interval_ms=0)
              if own_clients else
              RedisQueues.from_url(server.url, key_prefix=prefix, unack_handler_interval_ms=0))
    queue = queues.get("jobs")
    handled: list[str] = []
    worker = Worker(queue, lambda m: handled.append(m.id), concurrency=2)
    thread = worker.run_in_thread()
    queue.push([Message("one")])
    deadline = time.monotonic() + 10
    while not handled and time.monotonic() < deadline:
        time.sleep(0.02)
    assert handled == ["one"]
    time.sleep(0.2)  # the worker waits in a pop again
    worker.stop()
    queues.close()  # before the worker's thread has ended
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert [name for name in _ours() if name not in before] == []
    client.close()
    time.sleep(0.3)
    assert _errors(caplog, server) == []


def test_async_worker_stopped_then_factory_closed_leaves_no_task(
        server: RedisServer, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> tuple[list[str], list[str]]:
        queues = AsyncRedisQueues.from_url(server.url, key_prefix=unique("shut"),
                                           unack_handler_interval_ms=0)
        queue = queues.get("jobs")
        handled: list[str] = []

        async def handler(message: Message) -> None:
            handled.append(message.id)

        worker = AsyncWorker(queue, handler, concurrency=2)
        running = asyncio.create_task(worker.run())
        await queue.push([Message("one")])
        for _ in range(500):
            if handled:
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)
        worker.stop()
        await queues.aclose()
        await asyncio.wait_for(running, 10)
        left = [t.get_name() for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        return handled, left

    handled, left = asyncio.run(main())
    assert handled == ["one"]
    assert left == []
    assert _errors(caplog, server) == []
