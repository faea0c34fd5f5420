"""One RedisQueues factory per process, URL and options, shared by the transport's connections.

A Celery worker opens several kombu connections (the consumer, the producer pool, events,
gossip); each would otherwise start its own connections, unack reprocessor thread and doorbell
listeners. They share one factory, counted by reference and closed with the last connection.
The process id is part of the key: a forked pool child never uses its parent's threads.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from ..queues import RedisQueues
from .options import TransportOptions

_lock = threading.Lock()
_factories: dict[tuple[Any, ...], list[Any]] = {}


def acquire(url: str, options: TransportOptions) -> RedisQueues:
    """The shared factory of ``url`` and ``options`` in this process, made on first use.

    Raises:
        ConfigurationError: a bad URL or setting (nothing is written).
        RedisOperationError: (Cluster URLs) no node could be reached.
    """
    key = (os.getpid(), url, repr(options))
    with _lock:
        entry = _factories.get(key)
        if entry is None:
            factory = RedisQueues.from_url(url, **options.factory_kwargs())
            entry = _factories[key] = [factory, 0]
        entry[1] += 1
        return entry[0]  # type: ignore[no-any-return]


def release(factory: RedisQueues) -> None:
    """Give back one reference to ``factory``; the last one closes it."""
    with _lock:
        for key, entry in list(_factories.items()):
            if entry[0] is factory:
                entry[1] -= 1
                if entry[1] > 0:
                    return
                del _factories[key]
                break
        else:
            return
    factory.close()


def close_all() -> None:
    """Close every shared factory of this process, whoever still holds it (for shutdown
    hooks and tests: a Connection still open afterwards fails its next call)."""
    with _lock:
        entries = list(_factories.values())
        _factories.clear()
    for factory, _ in entries:
        factory.close()
