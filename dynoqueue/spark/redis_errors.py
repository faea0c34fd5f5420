"""The data source's own Redis calls raise :class:`~dynoqueue.errors.RedisOperationError`.

Queue operations (push, pop, ack, process_unacks) already raise it; the commands the data
source sends itself (ZCARD, ZRANGE, HMGET, LRANGE, TIME, its batch bookkeeping) go through
:func:`redis_errors`, so a caller never sees a bare redis-py exception.

This module does not import pyspark.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from redis.exceptions import RedisClusterException, RedisError

from ..errors import RedisOperationError
from .options import SourceOptions


@contextmanager
def redis_errors(operation: str, key: str, options: SourceOptions) -> Iterator[None]:
    """Turn redis-py errors raised in the block into :class:`RedisOperationError`.

    Args:
        operation: what the data source was doing, e.g. ``"spark_read"``.
        key: the key (or first key) it was working on.
        options: the source's options, named (URL redacted) in the message.

    Raises:
        RedisOperationError: a ``redis.RedisError`` or ``RedisClusterException`` (not a
            subclass of it) escaped the block; chained as ``__cause__``.
    """
    try:
        yield
    except (RedisError, RedisClusterException) as exc:
        raise RedisOperationError(operation, key, f"{options.describe()}: {exc}") from exc


def server_ms(conn: Any, operation: str, key: str, options: SourceOptions) -> int:
    """The Redis server's clock (TIME) in epoch ms: the time the queue's scripts use.

    Args:
        conn: a redis-py client (a queue's quorum or non-quorum connection).
        operation: named in an error, e.g. ``"spark_write"``.
        key: the queue's key named in an error.
        options: the source's options, named in an error.

    Raises:
        RedisOperationError: Redis failed.
    """
    with redis_errors(operation, key, options):
        seconds, micros = conn.time()
    return int(seconds) * 1000 + int(micros) // 1000
