"""A refused or unresolvable connection fails fast and names the endpoint, on both APIs and
through every builder; a server that answered before and restarts is still waited for.

Before the fix, ``RedisQueues.from_url("redis://localhost:<nothing>")`` then ``push`` retried
ECONNREFUSED for the whole retry budget (~9.8 s) and raised ``operation push_validated failed
on key dynoqueue.POLICY.x: Error 111 ...``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import dynoqueue.asyncio as dqa
from dynoqueue import ConnectionFailedError, Message, RedisOperationError, RedisQueues
from dynoqueue.embedded import RedisServer
from dynoqueue.embedded.ports import free_port

#: The issue's bound for a refused connection (the default budget gives up after ~0.75 s).
FAST_S = 2.0
SECRET = "s3cret-pw"


def _urls(port: int) -> dict[str, str]:
    return {
        "url": f"redis://:{SECRET}@127.0.0.1:{port}",
        "sentinel": f"redis+sentinel://127.0.0.1:{port}/mymaster",
        "cluster": f"redis+cluster://:{SECRET}@127.0.0.1:{port}",
        "unresolvable": "redis://no-such-host.invalid:6379",
    }


def _push_sync(url: str) -> None:
    queues = RedisQueues.from_url(url, unack_handler_interval_ms=0)
    try:
        queues.get("x").push([Message("m", "p")])
    finally:
        queues.close()


async def _push_async(url: str) -> None:
    queues = dqa.RedisQueues.from_url(url, unack_handler_interval_ms=0)
    try:
        await queues.get("x").push([Message("m", "p")])
    finally:
        await queues.aclose()


@pytest.mark.parametrize("api", ["sync", "async"])
@pytest.mark.parametrize("builder", ["url", "sentinel", "cluster", "unresolvable"])
def test_an_unreachable_deployment_fails_fast_naming_the_endpoint(api: str, builder: str) -> None:
    url = _urls(free_port())[builder]
    started = time.monotonic()
    with pytest.raises(ConnectionFailedError) as raised:
        if api == "sync":
            _push_sync(url)
        else:
            asyncio.run(_push_async(url))
    took = time.monotonic() - started
    error = raised.value
    text = str(error)
    assert isinstance(error, RedisOperationError)
    assert took < FAST_S, f"{builder}/{api} took {took:.1f} s"
    assert text.startswith("cannot reach Redis at "), text
    assert SECRET not in text
    for internal in ("push", "POLICY", "operation", "dynoqueue."):
        assert internal not in text, text
    if builder == "url":
        port = url.rsplit(":", 1)[1]
        assert text.startswith(f"cannot reach Redis at redis://:***@127.0.0.1:{port}")
    assert error.__cause__ is not None


@pytest.fixture()
def restarting() -> Iterator[RedisServer]:
    server = RedisServer(port=free_port()).start()  # a restart keeps the port
    yield server
    server.stop()


@pytest.mark.parametrize("api", ["sync", "async"])
def test_a_server_that_answered_before_is_waited_for_while_it_restarts(
        api: str, restarting: RedisServer) -> None:
    """Refusals of a server that answered before are a restart: the retry budget applies.
    (The server restarts from the test's thread: an embedded server dies with the thread
    that started it.)"""
    if api == "sync":
        queues: Any = RedisQueues.from_url(restarting.url, unack_handler_interval_ms=0)
        queue = queues.get("r")
        queue.push([Message("a", "p")])
        restarting.kill()
        errors: list[BaseException] = []

        def push() -> None:
            try:
                queues.ping()  # refused for ~1.5 s, then it answers
            except BaseException as exc:  # reported below
                errors.append(exc)
        pusher = threading.Thread(target=push)
        pusher.start()
        time.sleep(1.5)
        restarting.start()
        pusher.join(timeout=30)
        assert not errors, errors
        queues.close()
        return

    async def body() -> None:
        async with dqa.RedisQueues.from_url(restarting.url,
                                            unack_handler_interval_ms=0) as queues:
            queue = queues.get("r")
            await queue.push([Message("a", "p")])
            restarting.kill()
            pinging = asyncio.create_task(queues.ping())
            await asyncio.sleep(1.5)
            restarting.start()
            await pinging
    asyncio.run(body())
