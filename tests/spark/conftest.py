"""Spark fixtures: one real local SparkSession (``local[2]``, UI off, quiet) for the whole session.

Every test here talks to the real redis-server of the root ``redis_server`` fixture; nothing is
mocked. Spark start-up (~6 s) is paid once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from dynoqueue.embedded import RedisServer


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A local[2] SparkSession with the ``dynoqueue`` format registered."""
    from dynoqueue.spark.session import local_session

    session = local_session("dynoqueue-tests")
    yield session
    session.stop()


@pytest.fixture
def source(redis_server: RedisServer, prefix: str) -> dict[str, str]:
    """Options of a fresh queue ``q`` with three shards (zones z-a, z-b, z-c) on the server."""
    return {"url": redis_server.url, "queue": "q", "keyPrefix": prefix, "zones": "z-a,z-b,z-c"}


@pytest.fixture
def queue(source: dict[str, str]) -> Iterator[Any]:
    """The DynoQueue of ``source``, through the same builder the data source uses."""
    from dynoqueue.spark.options import SourceOptions, connected

    with connected(SourceOptions.parse(source), unack_timeout_ms=60_000) as queues:
        yield queues.get(source["queue"])


def wait_for(check: Callable[[], bool], timeout_s: float = 60.0, what: str = "") -> None:
    """Poll ``check`` every 0.1 s until it holds; fail the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:g} s waiting for {what or check}")
        time.sleep(0.1)


def queue_totals(queue: Any) -> tuple[int, int]:
    """(waiting, leased) over every shard."""
    sizes = queue.shard_sizes().values()
    return sum(s["size"] for s in sizes), sum(s["uacked"] for s in sizes)
