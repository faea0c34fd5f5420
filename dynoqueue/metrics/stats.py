"""What a queue holds right now, per shard: the metrics' names for the factory's stats read.

The read is ``RedisQueues.stats()`` of either API (its core: :mod:`dynoqueue.core.stats`, which
states its cost in round trips; its records: :mod:`dynoqueue.model.stats`). This module keeps
the names the metrics have always offered: :func:`read_stats` and :func:`read_stats_async` are
that call, and :class:`QueueStats`, :class:`ShardStats` and :class:`ReadCost` the records it
returns and fills.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core import calls
from ..core.listing import queue_names
from ..core.stats import COMMANDS_PER_SHARD, decode, plan
from ..model.stats import QueueStats, ReadCost, ShardStats

__all__ = [
    "COMMANDS_PER_SHARD",
    "QueueStats",
    "ReadCost",
    "ShardStats",
    "decode",
    "list_queues_async",
    "plan",
    "read_stats",
    "read_stats_async",
]


async def list_queues_async(queues: Any) -> list[str]:
    """Every queue under the prefix of an asyncio factory (a SCAN; see
    :func:`dynoqueue.core.listing.queue_names`), sorted.

    Raises:
        AccessDeniedError, RedisOperationError: as :func:`read_stats`.
    """
    return await calls.run_async(queue_names(queues, "list_queues"))


def read_stats(queues: Any, names: Sequence[str] | None = None,
               cost: ReadCost | None = None) -> list[QueueStats]:
    """Read the stats of queues of a sync :class:`dynoqueue.RedisQueues`, now: its
    :meth:`~dynoqueue.RedisQueues.stats` (see there).

    Args:
        queues: the factory.
        names: the queues to read; None: every queue found in Redis (a SCAN) or registered.
        cost: filled with the round trips and commands this read cost, if given.

    Returns:
        One :class:`QueueStats` per queue, in the order of ``names`` (sorted when listed).

    Raises:
        AccessDeniedError: wrong password, unknown user or a missing ACL permission.
        CallTimeoutError: the read outlasted the factory's ``call_timeout_ms``.
        RedisOperationError: Redis failed or cannot be reached.
    """
    found: list[QueueStats] = queues.stats(names, cost=cost)
    return found


async def read_stats_async(queues: Any, names: Sequence[str] | None = None,
                           cost: ReadCost | None = None) -> list[QueueStats]:
    """:func:`read_stats` for a :class:`dynoqueue.asyncio.RedisQueues` (same arguments): its
    awaited :meth:`~dynoqueue.asyncio.RedisQueues.stats`."""
    found: list[QueueStats] = await queues.stats(names, cost=cost)
    return found
