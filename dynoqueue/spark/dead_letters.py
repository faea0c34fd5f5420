"""Batch read of a queue's dead letters (option ``deadLetters``), for analysing failures.

The dead letters of queue ``Q`` are the zset ``P.DEAD.Q`` (ids scored by when they died, epoch
ms) and the hash ``P.DEADINFO.Q`` (id -> the record the scripts wrote: reason, deliveries, last
error, shard index, the message JSON). The read splits the zset into rank ranges of
``splitSize``, oldest first, like the queue read splits its shards' zsets. A partitioned queue's
dead letters are kept per partition: each partition's zset is split alike.

``partitions()`` runs in a Python worker of the driver; ``read()`` in executor tasks, each with
its own connection.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition

from ..errors import InvalidMessageError
from ..model.message import Message, as_text
from ..model.partitions import partition_keys
from ..model.policy import stored_partitions
from ..model.states import decode_record
from .batch_read import LOOKUP_CHUNK, rank_ranges
from .options import SourceOptions, connected
from .redis_errors import redis_errors
from .rows import timestamp

log = logging.getLogger("dynoqueue.spark")


@dataclass
class DeadRange(InputPartition):
    """One dead-letter partition: ranks ``start..stop`` (inclusive) of the dead zset.

    Attributes:
        key: the dead zset's key (``P.DEAD.Q``).
        start: first rank, >= 0 (rank 0 died first).
        stop: last rank, inclusive.
        info: the key of the records of the zset's letters (``P.DEADINFO.Q``).
    """

    key: str
    start: int
    stop: int
    info: str = ""


class DeadLetterReader(DataSourceReader):
    """Batch read of the dead letters: one row per dead letter, in
    :data:`~dynoqueue.spark.rows.DEAD_COLUMNS` order.

    Read-only, through the non-quorum connection. A letter redriven or purged while the read
    runs may be missed; one that dies meanwhile may be missed or seen twice.
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> list[DeadRange]:
        """Plan the read: ZCARD the dead zset (every partition's, for a partitioned queue),
        split it into rank ranges of ``splitSize``.

        Returns:
            The partitions (empty when the queue has no dead letters).

        Raises:
            RedisOperationError: Redis failed (the read fails before any task runs).
        """
        with connected(self.options) as queues:
            keys = queues.get(self.options.queue).keys
            conn = queues.non_quorum_conn
            with redis_errors("spark_read_dead_partitions", keys.dead, self.options):
                layout = partition_keys(keys, stored_partitions(conn.get(keys.policy)))
                pipe = conn.pipeline(transaction=False)
                for part in layout:
                    pipe.zcard(part.dead)
                sizes = pipe.execute()
        return [DeadRange(part.dead, lo, hi, part.dead_info)
                for part, size in zip(layout, sizes, strict=True)
                for lo, hi in rank_ranges(int(size), self.options.split_size)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        """Read one rank range: ids and times of death, then their records (HMGET in chunks).

        Yields:
            Rows ``(id, payload, priority, shard, reason, deliveries, last_error, died_at,
            headers)``.
            A letter whose message could not be decoded (reason ``undecodable``) has null
            payload and priority; an id whose record is gone (purged meanwhile) is skipped.

        Raises:
            RedisOperationError: Redis failed (Spark retries the task).
        """
        if not isinstance(partition, DeadRange):  # Spark's placeholder for "no partitions"
            return
        with connected(self.options) as queues:
            conn = queues.non_quorum_conn
            queue = queues.get(self.options.queue)
            info = partition.info or queue.keys.dead_info
            with redis_errors("spark_read_dead", partition.key, self.options):
                scored = conn.zrange(partition.key, partition.start, partition.stop,
                                     withscores=True)
            for i in range(0, len(scored), LOOKUP_CHUNK):
                chunk = scored[i:i + LOOKUP_CHUNK]
                with redis_errors("spark_read_dead", info, self.options):
                    records = conn.hmget(info, [member for member, _ in chunk])
                for (member, died_ms), raw in zip(chunk, records, strict=True):
                    if raw is not None:
                        yield _row(as_text(member), float(died_ms), decode_record(raw),
                                   queue.shards)


def _row(message_id: str, died_ms: float, rec: dict[str, Any],
         shards: Sequence[str]) -> tuple[Any, ...]:
    payload = priority = headers = None
    stored = rec.get("j")
    if stored is not None:
        try:
            message = Message.from_json(stored)
            payload, priority, headers = message.payload, message.priority, message.headers
        except InvalidMessageError as exc:
            if rec.get("r") != "undecodable":  # expected for those: that is why they died
                log.warning("unreadable dead letter %r: %s", message_id, exc)
    # ``sh`` is the 1-based shard index the script saw (absent for letters of unknown shard).
    index = rec.get("sh")
    shard = None
    if isinstance(index, (int, float)) and 1 <= int(index) <= len(shards):
        shard = shards[int(index) - 1]
    last_error = rec.get("l")
    return (message_id, payload, priority, shard, str(rec.get("r", "")) or None,
            int(rec.get("d") or 0), None if last_error is None else str(last_error),
            timestamp(died_ms), headers)
