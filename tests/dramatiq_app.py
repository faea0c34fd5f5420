"""The actors of tests/test_dramatiq.py, declared on any broker; outcomes recorded in Redis.

Each actor takes a ``tag`` (a key prefix unique to the test) and records what happened under it
in the records Redis (a plain redis-server, whatever deployment the broker runs on): list
``{tag}:start`` / ``{tag}:done`` entries are ``"<epoch ms>:<pid>"``, counter ``{tag}:tries``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import dramatiq
import redis

#: The queue every actor of the tests uses.
QUEUE = "jobs"
#: The zones of every broker of the tests (shards a, b and c).
ZONES = ["us-east-1a", "us-east-1b", "us-east-1c"]


def stamp() -> str:
    """``"<epoch ms>:<pid>"``."""
    return f"{int(time.time() * 1000)}:{os.getpid()}"


def declare(broker: dramatiq.Broker, records: redis.Redis) -> dict[str, dramatiq.Actor[Any, Any]]:
    """Declare the test actors on ``broker``; returns them by name."""

    def note(tag: str) -> None:
        records.rpush(f"{tag}:done", stamp())

    def flaky(tag: str, fails: int) -> None:
        records.rpush(f"{tag}:start", stamp())
        if records.incr(f"{tag}:tries") <= fails:
            raise RuntimeError(f"failing on purpose ({fails} times)")
        records.rpush(f"{tag}:done", stamp())

    def doomed(tag: str) -> None:
        records.incr(f"{tag}:tries")
        raise ValueError("always fails")

    def refuses(tag: str) -> None:
        records.incr(f"{tag}:tries")
        if not records.exists(f"{tag}:allowed"):
            raise LookupError("not allowed yet")
        records.rpush(f"{tag}:done", stamp())

    def slow(tag: str, seconds: float) -> None:
        records.rpush(f"{tag}:start", stamp())
        time.sleep(seconds)
        records.rpush(f"{tag}:done", stamp())

    def on_done(message: dict[str, Any], result: Any) -> None:
        records.rpush(f"{message['args'][0]}:callback", stamp())

    actors: dict[str, dramatiq.Actor[Any, Any]] = {}
    declared: tuple[tuple[Callable[..., None], dict[str, Any]], ...] = (
        (note, {}),
        (flaky, {"max_retries": 5, "min_backoff": 300, "max_backoff": 600}),
        (doomed, {"max_retries": 1, "min_backoff": 50, "max_backoff": 100}),
        (refuses, {"throws": (LookupError,)}),
        (slow, {"max_retries": 0, "time_limit": 60_000}),
        (on_done, {}))
    for fn, options in declared:
        actors[fn.__name__] = dramatiq.actor(broker=broker, queue_name=QUEUE,
                                             actor_name=fn.__name__, **options)(fn)
    return actors
