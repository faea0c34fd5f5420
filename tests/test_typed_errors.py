"""Every error a caller sees is a DynoQueueError: an exception redis-py raises from inside
that it did not mean to (an AttributeError while a Cluster client's slot map changes under a
resharding, a parser's TypeError) reaches the caller as a RedisOperationError with it as the
cause, and the connection it broke is not reused out of step with its replies.

The fault is injected into a real connection's reply read on a real redis-server, as redis-py's
own read does on a failure: the connection is closed, then the error raised."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis.asyncio.connection
import redis.connection

from dynoqueue import Message, RedisOperationError, SingleShardSupplier

from .apis import API_NAMES

pytestmark = pytest.mark.parametrize("api", API_NAMES, indirect=True)


@pytest.fixture
def broken_read(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """Makes the next ``left`` reply reads fail with a raw AttributeError (both APIs)."""
    state = {"left": 0}

    def breaker(real: Any, asynchronous: bool) -> Any:
        if asynchronous:
            async def read(self: Any, *args: Any, **kwargs: Any) -> Any:
                if state["left"] > 0:
                    state["left"] -= 1
                    await self.disconnect()
                    raise AttributeError("'NoneType' object has no attribute 'server_type'")
                return await real(self, *args, **kwargs)
            return read

        def read_sync(self: Any, *args: Any, **kwargs: Any) -> Any:
            if state["left"] > 0:
                state["left"] -= 1
                self.disconnect()
                raise AttributeError("'NoneType' object has no attribute 'server_type'")
            return real(self, *args, **kwargs)
        return read_sync

    for module, asynchronous in ((redis.connection, False), (redis.asyncio.connection, True)):
        cls = module.AbstractConnection
        monkeypatch.setattr(cls, "read_response", breaker(cls.read_response, asynchronous))
    yield state


@pytest.mark.deployments("single", "cluster")
def test_a_raw_redis_py_error_reaches_the_caller_typed(make_queues, broken_read) -> None:
    queues = make_queues(shard_supplier=SingleShardSupplier("a"))
    q = queues.get("typed")
    q.push([Message("before")])
    broken_read["left"] = 1
    with pytest.raises(RedisOperationError) as raised:
        q.push([Message("during")])
    assert isinstance(raised.value.__cause__, Exception)
    chain, cause = [], raised.value.__cause__
    while cause is not None:
        chain.append(type(cause).__name__)
        cause = cause.__cause__
    assert "AttributeError" in chain
    broken_read["left"] = 1
    with pytest.raises(RedisOperationError):
        q.pop(5, lease_ms=100)  # it may have leased them: back after the lease
    # The broken connections were dropped: the next calls read their own replies.
    q.push([Message("after")])  # a push whose outcome was unknown is safe to repeat
    time.sleep(0.2)
    queues.process_unacks()
    got = {m.id for m in q.pop(10)}
    assert {"before", "after"} <= got <= {"before", "during", "after"}
    assert q.ack_many(list(got)) == len(got)
