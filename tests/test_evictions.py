"""Evictions are never silent: where a user allowed an ``allkeys-*`` maxmemory-policy
(``eviction_check="warn"``), each unack pass reads ``evicted_keys`` from ``INFO stats`` and,
when it grew, logs an ERROR naming the deployment and counts ``dynoqueue_evicted_keys_total``.

Before the fix, a server that evicted every message of a queue left no trace in the logs or
the metrics.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

import dynoqueue.asyncio as dqa
from dynoqueue import Message, RedisQueues
from dynoqueue.embedded import RedisServer
from dynoqueue.metrics import QueueMetrics


@pytest.fixture(scope="module")
def evicting() -> Iterator[RedisServer]:
    """A small redis-server that evicts any key under memory pressure."""
    with RedisServer(extra_args=["--maxmemory", "4mb", "--maxmemory-policy",
                                 "allkeys-random"]) as server:
        yield server


def _fill(server: RedisServer) -> int:
    """Write far more than maxmemory; return how many keys the server evicted so far."""
    raw = server.client()
    blob = b"x" * 20_000
    pipe = raw.pipeline(transaction=False)
    for i in range(600):  # ~12 MB into 4 MB
        pipe.set(f"filler-{uuid.uuid4().hex[:6]}-{i}", blob)
    pipe.execute()
    evicted = int(raw.info("stats")["evicted_keys"])
    raw.close()
    return evicted


def _evicted_total(registry: CollectorRegistry) -> float:
    for line in generate_latest(registry).decode().splitlines():
        if line.startswith("dynoqueue_evicted_keys_total{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.mark.parametrize("api", ["sync", "async"])
def test_evictions_are_logged_and_counted_by_the_unack_pass(
        evicting: RedisServer, api: str, caplog: pytest.LogCaptureFixture) -> None:
    prefix = f"t{uuid.uuid4().hex[:10]}"
    registry = CollectorRegistry()
    metrics = QueueMetrics(registry=registry)
    caplog.set_level("WARNING", logger="dynoqueue")

    def body(passes: Any, push: Any) -> None:
        push()  # the first call checks the policy: allowed, with a warning
        passes()  # the first read of evicted_keys: the baseline
        assert not [r for r in caplog.records if r.levelname == "ERROR"]
        assert _fill(evicting) > 0
        passes()

    if api == "sync":
        with RedisQueues.from_url(evicting.url, key_prefix=prefix, eviction_check="warn",
                                  unack_handler_interval_ms=0) as queues:
            metrics.observe(queues)
            body(queues.process_unacks,
                 lambda: queues.get("jobs").push([Message(f"m{i}", "x") for i in range(50)]))
    else:
        async def run() -> None:
            async with dqa.RedisQueues.from_url(evicting.url, key_prefix=prefix,
                                                eviction_check="warn",
                                                unack_handler_interval_ms=0) as queues:
                metrics.observe(queues)
                loop = asyncio.get_running_loop()

                def passes() -> None:
                    asyncio.run_coroutine_threadsafe(queues.process_unacks(), loop).result(30)

                def push() -> None:
                    asyncio.run_coroutine_threadsafe(queues.get("jobs").push(
                        [Message(f"m{i}", "x") for i in range(50)]), loop).result(30)

                await loop.run_in_executor(None, body, passes, push)
        asyncio.run(run())

    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1, [r.getMessage() for r in caplog.records]
    text = errors[0].getMessage()
    assert f"127.0.0.1:{evicting.port}" in text and prefix in text
    assert "evicted" in text and "allkeys-random" in text
    assert _evicted_total(registry) > 0
