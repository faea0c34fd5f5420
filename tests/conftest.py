"""Shared fixtures: real redis-server processes (never mocks), started once per test session.

A missing redis-server fails the session with the install advice of
:func:`dynoqueue.embedded.find_redis_server`; it is never a silent skip.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from dynoqueue import RedisQueues, StaticShardSupplier
from dynoqueue.embedded import RedisServer, ZoneRing, single, zone_ring

ZONES = ["us-east-1a", "us-east-1b", "us-east-1c"]


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One stand-alone redis-server for the whole session; tests isolate by key prefix."""
    with single() as server:
        yield server


@pytest.fixture(scope="session")
def ring() -> Iterator[ZoneRing]:
    """A 3-zone ring: primary in us-east-1a, one replica in each of us-east-1b and us-east-1c."""
    with zone_ring(ZONES) as topology:
        yield topology


@pytest.fixture(params=[False, True], ids=["bytes", "decoded"])
def conn(request: pytest.FixtureRequest, redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A client of the session server, both with and without decode_responses."""
    client = redis_server.client(decode_responses=request.param)
    yield client
    client.close()


@pytest.fixture
def raw(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A plain decoding client for looking at keys directly."""
    client = redis_server.client(decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def prefix() -> str:
    """A key prefix unique to the test, so tests never see each other's keys."""
    return f"t{uuid.uuid4().hex[:12]}"


class FakeClock:
    """An injected clock in epoch ms that only moves when a test moves it."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = start_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_queues(
    redis_server: RedisServer, prefix: str
) -> Iterator[Callable[..., RedisQueues]]:
    """Build RedisQueues on the session server; every one is closed after the test.

    Defaults: shards a, b, c with a local; the reprocessor thread off (interval 0) so tests
    decide when unack processing runs. Keyword arguments override RedisQueues' arguments;
    ``conn=`` picks the client (default: a bytes client of the session server).
    """
    built: list[RedisQueues] = []
    clients: list[redis.Redis] = []

    def build(**overrides: Any) -> RedisQueues:
        client = overrides.pop("conn", None)
        if client is None:
            client = redis_server.client()
            clients.append(client)
        non_quorum = overrides.pop("non_quorum_conn", client)
        settings: dict[str, Any] = {
            "key_prefix": prefix,
            "shard_supplier": StaticShardSupplier(["a", "b", "c"], "a"),
            "unack_handler_interval_ms": 0,
        }
        settings.update(overrides)
        queues = RedisQueues(client, non_quorum, **settings)
        built.append(queues)
        return queues

    yield build
    for queues in built:
        queues.close()
    for client in clients:
        client.close()


_counter = itertools.count()


def unique(name: str = "q") -> str:
    """A queue name unique within the session."""
    return f"{name}{next(_counter)}"


def eventually(check: Callable[[], bool], timeout_s: float = 5.0, interval_s: float = 0.02) -> bool:
    """Poll ``check`` until it is true or ``timeout_s`` passes (generous bound for replication)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(interval_s)
    return check()
