"""Batch read of the ``dynoqueue`` format: a snapshot of a queue, split into rank ranges.

``partitions()`` runs in a Python worker of the driver; ``read()`` in executor tasks, each of
which opens its own connection (redis-py clients cannot be pickled) and closes it before it
returns.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition

from ..errors import InvalidMessageError
from ..model.message import Message, as_text
from .options import SourceOptions, connected
from .redis_errors import redis_errors
from .rows import UNACKED, WAITING, timestamp

log = logging.getLogger("dynoqueue.spark")

_HMGET_CHUNK = 1000


@dataclass
class ZsetRange(InputPartition):
    """One batch-read partition: ranks ``start..stop`` (inclusive) of one shard's zset.

    Attributes:
        shard: the shard name.
        state: ``"waiting"`` (the queue zset) or ``"unacked"`` (the unack zset).
        key: the zset's key.
        start: first rank, >= 0.
        stop: last rank, inclusive.
    """

    shard: str
    state: str
    key: str
    start: int
    stop: int


class DynoQueueReader(DataSourceReader):
    """Batch read: a snapshot of a queue, one partition per ``splitSize`` ids of each shard zset.

    Read-only. Reads go to the non-quorum connection (the local zone's replica when
    ``replicaUrls`` names one). Each partition is consistent in itself; a message that moves
    while the partitions are being read (popped, acked, put back) may be missed or seen twice.
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> list[ZsetRange]:
        """Plan the read: ZCARD every shard's queue and unack zsets, split into rank ranges.

        Returns:
            The partitions (empty for an empty queue).

        Raises:
            RedisOperationError: Redis failed (the read fails before any task runs).
        """
        with connected(self.options) as queues:
            queue = queues.get(self.options.queue)
            plan = [(shard, state, key)
                    for shard in queue.shards
                    for state, key in ((WAITING, queue.keys.queue_shard(shard)),
                                       (UNACKED, queue.keys.unack_shard(shard)))]
            pipe = queues.non_quorum_conn.pipeline(transaction=False)
            for _, _, key in plan:
                pipe.zcard(key)
            with redis_errors("spark_read_partitions", plan[0][2], self.options):
                sizes = [int(n) for n in pipe.execute()]
        step = self.options.split_size
        return [ZsetRange(shard, state, key, lo, min(lo + step, size) - 1)
                for (shard, state, key), size in zip(plan, sizes, strict=True)
                for lo in range(0, size, step)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        """Read one rank range: ids and scores, then their stored JSON (HMGET in chunks).

        Yields:
            Rows in :data:`~dynoqueue.spark.source.COLUMNS` order. An id whose payload is gone
            (stale) has null payload, priority and timeout.

        Raises:
            RedisOperationError: Redis failed (Spark retries the task).
        """
        if not isinstance(partition, ZsetRange):  # Spark's placeholder for "no partitions"
            return
        with connected(self.options) as queues:
            conn = queues.non_quorum_conn
            message_hash = queues.get(self.options.queue).keys.message_hash
            with redis_errors("spark_read", partition.key, self.options):
                scored = conn.zrange(partition.key, partition.start, partition.stop,
                                     withscores=True)
            for i in range(0, len(scored), _HMGET_CHUNK):
                chunk = scored[i:i + _HMGET_CHUNK]
                with redis_errors("spark_read", message_hash, self.options):
                    raws = conn.hmget(message_hash, [member for member, _ in chunk])
                for (member, score), raw in zip(chunk, raws, strict=True):
                    yield self._row(partition, as_text(member), float(score), raw)

    @staticmethod
    def _row(p: ZsetRange, message_id: str, score: float, raw: Any) -> tuple[Any, ...]:
        payload = priority = timeout = None
        if raw is not None:
            try:
                message = Message.from_json(raw)
                payload, priority, timeout = message.payload, message.priority, message.timeout
            except InvalidMessageError as exc:
                log.warning("unreadable stored message %r: %s", message_id, exc)
        waiting = p.state == WAITING
        # A waiting score is due ms + priority/100; an unack score is the lease expiry in ms.
        due = timestamp(math.floor(score)) if waiting else None
        lease = None if waiting else timestamp(score)
        return (message_id, payload, priority, timeout, p.shard, p.state, due, lease, None,
                None)
