"""Streaming read and write of the ``dynoqueue`` format: at-least-once with a replayable batch.

Streaming read, the recorded-slice protocol:

* every trigger the driver-side reader claims (leases) up to ``maxMessagesPerTrigger`` due
  messages, with a lease of ``leaseMs``, and records them in Redis under the next batch number
  (``P.SPARK.{Q}.<consumer>.BATCH.<n>``, see :class:`dynoqueue.model.keys.StreamKeys`) before
  returning that number as the new offset;
* executors read the recorded batch, never the live queue, in slices of ``splitSize``
  (:class:`RecordedSlice`), so a batch that Spark re-runs after a crash yields exactly the
  same messages;
* a batch is acked (and its record deleted) only after Spark committed it: in ``commit(end)``,
  and, because Spark calls that lazily (not before the next batch is planned), also when a
  later ``latestOffset(start)`` shows that Spark's checkpoint has moved past it;
* a crash between a claim and its record leaves the messages leased but unrecorded; they come
  back when their lease expires (the reader puts back expired leases of every shard, at most
  once a second, unless ``processUnacks`` is false).

Streaming write: each micro-batch is pushed like a batch write (:func:`push_rows`).

The reader's offset calls run in a long-lived Python worker of the driver, ``read()`` and the
writer's ``write()`` in executor tasks, each with its own connection. No background thread
runs anywhere (``unack_handler_interval_ms=0``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from pyspark.sql.datasource import (
    DataSourceStreamReader,
    DataSourceStreamWriter,
    InputPartition,
    WriterCommitMessage,
)

from .. import MessageState
from ..errors import ConfigurationError, RedisOperationError
from ..model.clock import system_clock_ms
from ..model.keys import StreamKeys
from ..model.message import Message, as_text
from ..queue import DynoQueue
from ..queues import RedisQueues
from .batch_write import PartitionWritten, WriteColumns, push_rows, summary
from .options import SourceOptions, connected, open_queues
from .redis_errors import redis_errors
from .rows import UNACKED, timestamp

log = logging.getLogger("dynoqueue.spark")

_RPUSH_CHUNK = 1000
#: A claim with no limit (ReadAllAvailable) takes due messages in chunks of this many.
_CLAIM_CHUNK = 10_000
#: The stream reader puts back expired leases at most this often.
_SWEEP_INTERVAL_S = 1.0
_LEASED = MessageState.LEASED.name


@dataclass
class RecordedSlice(InputPartition):
    """One stream-read partition: list indexes ``start..stop`` (inclusive) of a recorded batch."""

    key: str
    batch: int
    start: int
    stop: int


class DynoQueueStreamReader(DataSourceStreamReader):
    """Streaming read of due messages, acked after Spark commits their batch (at-least-once).

    The offset is ``{"queue": Q, "consumer": C, "batch": n}``: batches 1..n were claimed and
    recorded. See the module docstring for the protocol. Give every concurrently running query
    on a queue its own ``consumerName``; a query restarted from its checkpoint must keep it.

    Rows: the :data:`~dynoqueue.spark.rows.SCHEMA` columns with state ``"unacked"``
    (lifecycle_state ``LEASED``), ``deliveries`` (as the claim counted them), ``claimed_at``
    (driver time just after the claim, so never before the server's claim time) and
    ``lease_expiry`` (driver time just before the claim plus ``leaseMs``: the lease holds at
    least until then).
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.keys = StreamKeys(options.key_prefix, options.queue, options.consumer_name)
        self._queues: RedisQueues | None = None
        self._sweepers: list[RedisQueues] = []
        self._last_sweep = 0.0
        self._current: int | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Spark pickles the reader for its read tasks: never ship a live client.
        state = dict(self.__dict__)
        state.update(_queues=None, _sweepers=[], _last_sweep=0.0)
        return state

    # -- offsets

    def _offset(self, batch: int) -> dict[str, Any]:
        return {"queue": self.options.queue, "consumer": self.options.consumer_name,
                "batch": batch}

    def _batch_of(self, offset: Mapping[str, Any]) -> int:
        if (offset.get("queue"), offset.get("consumer")) != (self.options.queue,
                                                             self.options.consumer_name):
            raise ConfigurationError(
                f"dynoqueue stream: the checkpoint's offset {dict(offset)} is for another queue "
                f"or consumer than queue {self.options.queue!r}, consumerName "
                f"{self.options.consumer_name!r}; use a new checkpointLocation"
            )
        return int(offset["batch"])

    def initialOffset(self) -> dict[str, Any]:
        """Where a new query starts: just before the oldest recorded, unacked batch (so a
        query started afresh with the same consumer name replays it), else after the last.

        Raises:
            RedisOperationError: Redis failed.
        """
        conn = self._open().quorum_conn
        with redis_errors("spark_stream_initial_offset", self.keys.pending, self.options):
            oldest = conn.zrange(self.keys.pending, 0, 0)
            if oldest:
                start = int(as_text(oldest[0])) - 1
            else:
                start = int(conn.get(self.keys.last) or 0)
        self._current = start
        return self._offset(start)

    def getDefaultReadLimit(self) -> Any:
        """``ReadMaxRows(maxMessagesPerTrigger)`` (Spark 4.2+ admission control)."""
        from pyspark.sql.streaming.datasource import ReadMaxRows

        return ReadMaxRows(self.options.max_messages_per_trigger)

    def latestOffset(self, start: dict[str, Any] | None = None,
                     limit: Any = None) -> dict[str, Any]:
        """Claim and record the next batch, or return ``start`` when nothing is due.

        Spark 4.2+ passes ``start`` (the end of the last batch it finished and logged as
        committed) and a read limit; 4.0/4.1 pass neither, and the reader tracks the offset
        itself. Batches up to ``start`` are acked first: Spark asks for the next offset only
        once the previous batch is committed, which may be long before ``commit`` is called.

        Returns:
            The new end offset: ``start`` + 1 batch, or ``start`` if nothing was claimed.

        Raises:
            ConfigurationError: the checkpoint belongs to another queue or consumer.
            RedisOperationError: Redis failed (Spark retries the trigger after a restart).
        """
        queues = self._open()
        if start is None:
            begin = self._current if self._current is not None else self._last_recorded()
        else:
            begin = self._batch_of(start)
            self._ack_through(begin)
        number = begin + 1
        key = self.keys.batch(number)
        with redis_errors("spark_stream_latest_offset", key, self.options):
            recorded = queues.quorum_conn.exists(key)
        if recorded:  # recorded, never run: replay it
            self._current = number
            return self._offset(number)
        self._sweep()
        claimed_before = system_clock_ms()
        messages = self._claim(self._wanted(limit))
        claimed_at = system_clock_ms()
        if not messages:
            self._current = begin
            return self._offset(begin)
        self._record(number, messages, claimed_at, claimed_before + self.options.lease_ms)
        self._current = number
        return self._offset(number)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[RecordedSlice]:
        """The recorded batches after ``start`` up to ``end``, in slices of ``splitSize``.

        A batch whose record is gone was acked after Spark committed it (a checkpoint older
        than the queue's state): it is skipped with a warning; its messages were delivered.

        Raises:
            ConfigurationError: an offset belongs to another queue or consumer.
            RedisOperationError: Redis failed.
        """
        first, last = self._batch_of(start) + 1, self._batch_of(end)
        conn = self._open().quorum_conn
        step = self.options.split_size
        out: list[RecordedSlice] = []
        for number in range(first, last + 1):
            key = self.keys.batch(number)
            with redis_errors("spark_stream_partitions", key, self.options):
                size = int(conn.llen(key))
            if size == 0:
                log.warning("dynoqueue stream %s: recorded batch %d is gone (already acked); "
                            "skipping it", self.options.describe(), number)
                continue
            out += [RecordedSlice(key, number, lo, min(lo + step, size) - 1)
                    for lo in range(0, size, step)]
        return out

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        """Executor side: read a slice of a recorded batch (never the live queue).

        Yields:
            Rows in :data:`~dynoqueue.spark.rows.COLUMNS` order: ``lifecycle_state``
            ``LEASED``, ``deliveries`` as counted by the claim; ``max_deliveries``,
            ``expires_at`` and ``last_error`` null; ``group`` the message's (null in batches
            recorded before the column existed).

        Raises:
            RedisOperationError: Redis failed (Spark retries the task).
        """
        if not isinstance(partition, RecordedSlice):
            return
        with (connected(self.options) as queues,
              redis_errors("spark_stream_read", partition.key, self.options)):
            raws = queues.quorum_conn.lrange(partition.key, partition.start, partition.stop)
        for raw in raws:
            doc = orjson.loads(raw)
            # Batches recorded before the lifecycle columns existed have no "deliveries".
            deliveries = doc.get("deliveries")
            yield (doc["id"], doc.get("payload"), doc.get("priority"), doc.get("timeout"),
                   doc.get("shard"), UNACKED, None, timestamp(doc["lease_expiry"]),
                   timestamp(doc["claimed_at"]), partition.batch, _LEASED,
                   None if deliveries is None else int(deliveries), None, None, None,
                   doc.get("group"), doc.get("headers"))

    def commit(self, end: dict[str, Any]) -> None:
        """Spark committed every batch up to ``end``: ack their messages, drop their records.

        Raises:
            ConfigurationError: ``end`` belongs to another queue or consumer.
            RedisOperationError, QuorumNotReachedError: Redis failed (a later commit or
                ``latestOffset`` acks the batches again).
        """
        self._ack_through(self._batch_of(end))

    def stop(self) -> None:
        """Close the driver-side connections (the query stopped). Leaves leases as they are."""
        for sweeper in self._sweepers:
            if sweeper is not self._queues:
                sweeper.close()
        if self._queues is not None:
            self._queues.close()
        self._queues = None
        self._sweepers = []

    # -- internals

    def _open(self) -> RedisQueues:
        if self._queues is None:
            self._queues = open_queues(self.options, unack_timeout_ms=self.options.lease_ms)
        return self._queues

    def _queue(self) -> DynoQueue:
        return self._open().get(self.options.queue)

    def _last_recorded(self) -> int:
        conn = self._open().quorum_conn
        with redis_errors("spark_stream_latest_offset", self.keys.last, self.options):
            return int(conn.get(self.keys.last) or 0)

    def _wanted(self, limit: Any) -> int | None:
        if limit is None:  # Spark 4.0/4.1: no admission control
            return self.options.max_messages_per_trigger
        if type(limit).__name__ == "ReadAllAvailable":
            return None
        rows = getattr(limit, "maxRows", None)
        if isinstance(rows, int) and rows > 0:
            return rows
        return self.options.max_messages_per_trigger

    def _claim(self, wanted: int | None) -> list[Message]:
        queue = self._queue()
        pop = queue.unsafe_pop_all_shards if self.options.claim_shards == "all" else queue.pop
        if wanted is not None:
            return pop(wanted)
        claimed: list[Message] = []
        while True:  # ReadAllAvailable: everything due, in chunks
            got = pop(_CLAIM_CHUNK)
            claimed += got
            if len(got) < _CLAIM_CHUNK:
                return claimed

    def _record(self, number: int, messages: list[Message], claimed_at: int,
                lease_expiry: int) -> None:
        docs = [orjson.dumps({"id": m.id, "payload": m.payload, "priority": m.priority,
                              "group": m.group, "headers": m.headers,
                              "timeout": m.timeout, "shard": m.shard, "claimed_at": claimed_at,
                              "lease_expiry": lease_expiry, "deliveries": m.deliveries,
                              "receipt": m.receipt})
                for m in messages]
        key = self.keys.batch(number)
        conn = self._open().quorum_conn
        with redis_errors("spark_stream_record", key, self.options):
            last = int(conn.get(self.keys.last) or 0)
            pipe = conn.pipeline(transaction=True)  # one slot ({Q}): atomic on Cluster too
            pipe.delete(key)
            for i in range(0, len(docs), _RPUSH_CHUNK):
                pipe.rpush(key, *docs[i:i + _RPUSH_CHUNK])
            pipe.zadd(self.keys.pending, {str(number): number})
            pipe.set(self.keys.last, max(last, number))
            pipe.execute()

    def _ack_through(self, through: int) -> None:
        conn = self._open().quorum_conn
        with redis_errors("spark_stream_ack", self.keys.pending, self.options):
            pending = conn.zrangebyscore(self.keys.pending, "-inf", through)
        for number in [int(as_text(n)) for n in pending]:
            key = self.keys.batch(number)
            with redis_errors("spark_stream_ack", key, self.options):
                raws = conn.lrange(key, 0, -1)
            # Each with its lease receipt: a batch that outlived its lease cannot end the lease
            # a later batch holds on the same message (one recorded before receipts: any lease).
            leases = [_leased(orjson.loads(raw)) for raw in raws]
            acked = self._queue().ack_many(leases) if leases else 0
            with redis_errors("spark_stream_ack", key, self.options):
                pipe = conn.pipeline(transaction=True)
                pipe.zrem(self.keys.pending, str(number))
                pipe.delete(key)
                pipe.execute()
            if acked < len(leases):  # leases that ran out: those messages come again later
                log.warning("dynoqueue stream %s: batch %d acked %d of %d (the rest outlived "
                            "their lease and will be delivered again)",
                            self.options.describe(), number, acked, len(leases))

    def _sweep(self) -> None:
        """Put back expired leases of every shard, at most once a second; never fails a trigger.

        A Redis failure is logged and ends this sweep (every sweeper writes to the same
        primary, so the other shards would only fail alike, each after its retries); the next
        trigger at least a second later tries again. Until then expired leases wait: their
        messages come late, never get lost. Other errors (configuration) propagate.
        """
        if not self.options.process_unacks:
            return
        now = time.monotonic()
        if now - self._last_sweep < _SWEEP_INTERVAL_S:
            return
        self._last_sweep = now
        shard = "?"  # not known yet while the factories are being built
        try:
            for sweeper in self._sweeper_factories():
                shard = sweeper.local_shard
                queue = sweeper.get(self.options.queue)
                with redis_errors("process_unacks", queue.keys.unack_shard(shard),
                                  self.options):
                    queue.process_unacks()
        except RedisOperationError as exc:
            log.warning("dynoqueue stream %s: putting back expired leases of shard %s failed, "
                        "the next trigger tries again: %s", self.options.describe(), shard, exc)

    def _sweeper_factories(self) -> list[RedisQueues]:
        """One factory per zone (built on first use, closed by :meth:`stop`).

        process_unacks acts on a factory's local shard, and a Spark consumer's leases live in
        every shard: one factory per zone, built like the others (so a clock or Dynomite
        profile of the builder applies), or the one factory of a 1-shard queue.
        """
        if not self._sweepers:
            built: list[RedisQueues] = []
            try:
                for zone in self.options.zones or ():
                    built.append(open_queues(self.options, unack_timeout_ms=self.options.lease_ms,
                                             local_zone=zone))
            except BaseException:  # e.g. a Cluster that cannot be reached: close what was built
                for queues in built:
                    queues.close()
                raise
            self._sweepers = built or [self._open()]
        return self._sweepers


class DynoQueueStreamWriter(DataSourceStreamWriter):
    """Streaming write: each micro-batch is pushed like a batch write (idempotent by id).

    A batch that Spark replays after a crash pushes its ids again; they are moved, not
    duplicated (and their delay restarts from the new push).
    """

    def __init__(self, options: SourceOptions, columns: WriteColumns) -> None:
        self.options = options
        self.columns = columns

    def write(self, iterator: Iterator[Any]) -> PartitionWritten:
        """Executor side: push this task's rows of the micro-batch (:func:`push_rows`)."""
        return push_rows(self.options, self.columns, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Driver side: log the rows written per partition of micro-batch ``batchId``."""
        log.info("dynoqueue stream write to %s, batch %d: %s", self.options.describe(),
                 batchId, summary(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Driver side: log what the finished partitions of a failed micro-batch pushed."""
        log.warning("dynoqueue stream write to %s, batch %d aborted; pushed before: %s",
                    self.options.describe(), batchId, summary(messages))


def _leased(doc: dict[str, Any]) -> Message | str:
    """A recorded claim as ``ack_many`` takes it: the Message with its receipt, else the id."""
    if not doc.get("receipt"):
        return str(doc["id"])
    message = Message(str(doc["id"]), shard=doc.get("shard"))
    message.receipt = str(doc["receipt"])
    return message

