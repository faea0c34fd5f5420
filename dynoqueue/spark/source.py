"""The ``dynoqueue`` PySpark data source: batch and streaming, read and write.

Register it once per session, then use it like any Spark format (options: ``docs/spark.md``)::

    from dynoqueue.spark.source import register
    register(spark)
    df.write.format("dynoqueue").option("url", url).option("queue", "q").mode("append").save()
    snapshot = spark.read.format("dynoqueue").option("url", url).option("queue", "q").load()
    due = spark.readStream.format("dynoqueue").option("url", url).option("queue", "q").load()
    query = (rows.writeStream.format("dynoqueue").option("url", url).option("queue", "q")
             .option("checkpointLocation", ck).start())

Where code runs (Spark's Python data source model): ``partitions()`` and the stream reader's
offset calls run in a long-lived Python worker of the driver; ``read()`` and ``write()`` run in
executor tasks, each of which opens its own connection (redis-py clients cannot be pickled) and
closes it before returning. No background thread runs anywhere (``unack_handler_interval_ms=0``).

Streaming read, at-least-once with a replayable batch:

* every trigger the driver-side reader claims (leases) up to ``maxMessagesPerTrigger`` due
  messages, with a lease of ``leaseMs``, and records them in Redis under the next batch number
  (``P.SPARK.{Q}.<consumer>.BATCH.<n>``) before returning that number as the new offset;
* executors read the recorded batch, never the live queue, so a batch that Spark re-runs after
  a crash yields exactly the same messages;
* a batch is acked (and its record deleted) only after Spark committed it: in ``commit(end)``,
  and, because Spark calls that lazily (not before the next batch is planned), also when a
  later ``latestOffset(start)`` shows that Spark's checkpoint has moved past it;
* a crash between a claim and its record leaves the messages leased but unrecorded; they come
  back when their lease expires (the reader puts back expired leases of every shard, at most
  once a second, unless ``processUnacks`` is false).
"""

from __future__ import annotations

import importlib.util
import logging
import math
import time
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ByteType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
    TimestampType,
)

from ..errors import ConfigurationError, DynoQueueError, InvalidMessageError
from ..model.clock import system_clock_ms
from ..model.message import Message, as_text
from ..queue import DynoQueue
from ..queues import RedisQueues
from .options import SourceOptions, connected, open_queues

log = logging.getLogger("dynoqueue.spark")

#: The format name: ``spark.read.format("dynoqueue")``.
FORMAT = "dynoqueue"

#: What every read (batch or stream) returns. Batch reads leave ``claimed_at`` and ``batch``
#: null; stream reads leave ``due`` null (a claim does not return the due time).
SCHEMA = (
    "id string not null, payload string, priority int, timeout long, shard string, "
    "state string, due timestamp, lease_expiry timestamp, claimed_at timestamp, batch long"
)
COLUMNS = ("id", "payload", "priority", "timeout", "shard", "state", "due", "lease_expiry",
           "claimed_at", "batch")

#: The columns a write accepts; ``id`` is required, ``timeout`` and ``due`` exclude each other.
WRITE_COLUMNS = ("id", "payload", "timeout", "due", "priority")

_INTEGRAL = (ByteType, ShortType, IntegerType, LongType)
_HMGET_CHUNK = 1000
_RPUSH_CHUNK = 1000
#: A claim with no limit (ReadAllAvailable) takes due messages in chunks of this many.
_CLAIM_CHUNK = 10_000
#: The stream reader puts back expired leases at most this often.
_SWEEP_INTERVAL_S = 1.0

WAITING = "waiting"
UNACKED = "unacked"


def require_pyarrow() -> None:
    """Check that pyarrow is importable (Spark's Python data source workers need it).

    Raises:
        ConfigurationError: pyarrow is missing; the message says what to install.
    """
    if importlib.util.find_spec("pyarrow") is None:
        raise ConfigurationError(
            "the dynoqueue Spark data source needs pyarrow in the driver's and the workers' "
            "Python: pip install 'dynoqueue[spark]' (and make PYSPARK_PYTHON that interpreter)"
        )


def register(spark: Any) -> None:
    """Register the ``dynoqueue`` format with a SparkSession (``spark.dataSource.register``).

    Raises:
        ConfigurationError: pyarrow is missing.
    """
    require_pyarrow()
    spark.dataSource.register(DynoQueueDataSource)


def _ts(ms: float | None) -> datetime | None:
    """Epoch ms -> an aware UTC datetime (Spark's TimestampType), or None."""
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


class DynoQueueDataSource(DataSource):
    """The ``dynoqueue`` format. See the module docstring and ``docs/spark.md``.

    Args:
        options: Spark's option map (case-insensitive); parsed at once, so a bad option fails
            ``load()``, ``save()`` or ``start()`` before any task runs.

    Raises:
        ConfigurationError: a missing or malformed option, or pyarrow is missing.
    """

    def __init__(self, options: MutableMapping[str, str]) -> None:
        super().__init__(options)
        require_pyarrow()
        self.parsed = SourceOptions.parse(options)

    @classmethod
    def name(cls) -> str:
        """The format name, ``"dynoqueue"``."""
        return FORMAT

    def schema(self) -> str:
        """The read schema (:data:`SCHEMA`), the same for batch and streaming reads."""
        return SCHEMA

    def reader(self, schema: StructType) -> DynoQueueReader:
        """The batch reader (a snapshot). Raises ConfigurationError for a custom schema."""
        _check_read_schema(schema)
        return DynoQueueReader(self.parsed)

    def writer(self, schema: StructType, overwrite: bool) -> DynoQueueWriter:
        """The batch writer for a DataFrame of ``schema``.

        Raises:
            ConfigurationError: ``overwrite`` (only append is supported), or a column that is
                unknown, missing or of the wrong type (see :meth:`WriteColumns.of`).
        """
        if overwrite:
            raise ConfigurationError(
                "dynoqueue: only mode('append') is supported: a queue is not overwritten "
                "(clear it with DynoQueue.clear() if that is what you want)"
            )
        return DynoQueueWriter(self.parsed, WriteColumns.of(schema))

    def streamReader(self, schema: StructType) -> DynoQueueStreamReader:
        """The streaming reader of due messages. Raises ConfigurationError for a custom schema."""
        _check_read_schema(schema)
        return DynoQueueStreamReader(self.parsed)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DynoQueueStreamWriter:
        """The streaming writer. Raises ConfigurationError as :meth:`writer` does."""
        if overwrite:
            raise ConfigurationError("dynoqueue: only outputMode('append') is supported")
        return DynoQueueStreamWriter(self.parsed, WriteColumns.of(schema))


def _check_read_schema(schema: StructType) -> None:
    if tuple(schema.fieldNames()) != COLUMNS:
        raise ConfigurationError(
            f"dynoqueue: the read schema is fixed ({SCHEMA}); do not pass .schema(...), "
            f"select columns after load() instead (got {schema.simpleString()})"
        )


# ------------------------------------------------------------------------------- batch read


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
            sizes = [int(n) for n in pipe.execute()]
        step = self.options.split_size
        return [ZsetRange(shard, state, key, lo, min(lo + step, size) - 1)
                for (shard, state, key), size in zip(plan, sizes, strict=True)
                for lo in range(0, size, step)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        """Read one rank range: ids and scores, then their stored JSON (HMGET in chunks).

        Yields:
            Rows in :data:`COLUMNS` order. An id whose payload is gone (stale) has null
            payload, priority and timeout.
        """
        if not isinstance(partition, ZsetRange):  # Spark's placeholder for "no partitions"
            return
        with connected(self.options) as queues:
            conn = queues.non_quorum_conn
            message_hash = queues.get(self.options.queue).keys.message_hash
            scored = conn.zrange(partition.key, partition.start, partition.stop, withscores=True)
            for i in range(0, len(scored), _HMGET_CHUNK):
                chunk = scored[i:i + _HMGET_CHUNK]
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
        due = _ts(math.floor(score)) if waiting else None
        lease = None if waiting else _ts(score)
        return (message_id, payload, priority, timeout, p.shard, p.state, due, lease, None,
                None)


# ------------------------------------------------------------------------------- writes


@dataclass(frozen=True)
class WriteColumns:
    """Positions of the write columns in the input rows (-1: absent).

    Built on the driver from the DataFrame's schema, so a wrong column name or type fails the
    job before any task runs.
    """

    id: int
    payload: int
    timeout: int
    due: int
    priority: int

    @classmethod
    def of(cls, schema: StructType) -> WriteColumns:
        """Check a DataFrame schema for writing.

        Accepts ``id`` (string, required), ``payload`` (string), ``timeout`` (integral, delay in
        ms from the push) or ``due`` (timestamp: delivered at that time), ``priority`` (integral,
        0..99). Column names are matched case-insensitively.

        Raises:
            ConfigurationError: ``id`` is missing, a column is unknown, of the wrong type, or
                both ``timeout`` and ``due`` are given.
        """
        fields = {f.name.lower(): (i, f) for i, f in enumerate(schema.fields)}
        unknown = sorted(set(fields) - set(WRITE_COLUMNS))
        if unknown:
            raise ConfigurationError(
                f"dynoqueue write: unknown column(s) {unknown}; a write takes id (string), "
                "payload (string), timeout (long, ms) or due (timestamp), priority (int 0..99)"
            )
        if "id" not in fields:
            raise ConfigurationError("dynoqueue write: the DataFrame needs an 'id' column")
        if "timeout" in fields and "due" in fields:
            raise ConfigurationError(
                "dynoqueue write: give either 'timeout' (delay ms) or 'due' (timestamp), not both"
            )
        expected = {"id": (StringType,), "payload": (StringType,), "timeout": _INTEGRAL,
                    "priority": _INTEGRAL, "due": (TimestampType,)}
        for name, (_, f) in fields.items():
            if not isinstance(f.dataType, expected[name]):
                wanted = "/".join(t.typeName() for t in expected[name])
                raise ConfigurationError(
                    f"dynoqueue write: column {f.name!r} has type {f.dataType.simpleString()}, "
                    f"expected {wanted}; cast it first"
                )
        return cls(**{name: fields[name][0] if name in fields else -1
                      for name in WRITE_COLUMNS})


@dataclass
class PartitionWritten(WriterCommitMessage):
    """What one write task pushed (the commit message Spark hands to ``commit``).

    Attributes:
        partition: the Spark partition id.
        attempt: the task attempt number.
        rows: messages pushed.
        pushes: push calls made (each one pipelined round trip per 500 messages).
    """

    partition: int
    attempt: int
    rows: int
    pushes: int


def _task_ids() -> tuple[int, int]:
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:  # called outside a Spark task (e.g. directly from Python)
        return 0, 0
    return int(context.partitionId()), int(context.attemptNumber())


def push_rows(options: SourceOptions, columns: WriteColumns,
              rows: Iterator[Sequence[Any]]) -> PartitionWritten:
    """Push rows to the queue in batches of ``batchSize`` (the work of one write task).

    Each batch is validated completely before it is pushed, so a bad row stops the task with
    nothing of its batch written. A null ``timeout``/``due``/``priority`` means 0 / now / 0.
    With a ``due`` column the delay is ``due`` minus the Redis server's time, read once per
    batch just before its push (never negative), so a message is never due before ``due``.

    Args:
        options: the parsed options.
        columns: where each write column sits in a row (:meth:`WriteColumns.of`).
        rows: Spark Rows (or any sequences) of the task's partition.

    Returns:
        The commit message: partition, attempt, rows pushed, push calls.

    Raises:
        InvalidMessageError: a bad row (null or empty id, priority outside 0..99, negative
            timeout, non-string payload, payload too large); the message names the partition,
            the row number and the id, and says how many rows of this task were pushed before.
        RedisOperationError, QuorumNotReachedError: Redis failed (pushing again is safe).
    """
    partition, attempt = _task_ids()
    pushed = pushes = 0
    number = 0
    pending: list[tuple[Message, float | None]] = []

    def bad(message_id: Any, why: str) -> InvalidMessageError:
        return InvalidMessageError(
            f"dynoqueue write to {options.describe()}: bad row {number} of partition "
            f"{partition} (id={message_id!r}): {why}. Rows from its batch on were not pushed; "
            f"{pushed} earlier rows of this partition were (pushes are idempotent by id: fix "
            "the data and run the write again)"
        )

    with connected(options) as queues:
        queue = queues.get(options.queue)

        def flush() -> None:
            nonlocal pushed, pushes
            if not pending:
                return
            if columns.due >= 0:
                now = _server_ms(queues)
                for message, due_ms in pending:
                    if due_ms is not None:  # never due before the row's due time
                        message.timeout = max(0, math.ceil(due_ms - now))
            try:
                queue.push([message for message, _ in pending])
            except InvalidMessageError as exc:  # e.g. a payload over max_payload_bytes
                raise InvalidMessageError(
                    f"dynoqueue write to {options.describe()}: partition {partition}: {exc}. "
                    f"Nothing of this batch was pushed; {pushed} earlier rows of this "
                    "partition were"
                ) from None
            pushed += len(pending)
            pushes += 1
            pending.clear()

        for row in rows:
            number += 1
            message_id = row[columns.id]
            payload = row[columns.payload] if columns.payload >= 0 else None
            priority = row[columns.priority] if columns.priority >= 0 else None
            timeout = row[columns.timeout] if columns.timeout >= 0 else None
            due = row[columns.due] if columns.due >= 0 else None
            if not isinstance(message_id, str) or not message_id:
                raise bad(message_id, "id must be a non-empty string")
            due_ms = None
            if due is not None:
                if not isinstance(due, datetime):
                    raise bad(message_id, f"due must be a timestamp, got {due!r}")
                due_ms = due.timestamp() * 1000  # naive = local time, as pyspark hands it
            try:  # every field check of Message, before anything of the batch is pushed
                message = Message(message_id, payload, 0 if timeout is None else timeout,
                                  0 if priority is None else priority)
            except InvalidMessageError as exc:
                raise bad(message_id, str(exc)) from None
            pending.append((message, due_ms))
            if len(pending) >= options.batch_size:
                flush()
        flush()
    return PartitionWritten(partition, attempt, pushed, pushes)


def _server_ms(queues: RedisQueues) -> int:
    seconds, micros = queues.quorum_conn.time()
    return int(seconds) * 1000 + int(micros) // 1000


def _summary(messages: Sequence[WriterCommitMessage | None]) -> str:
    done = [m for m in messages if isinstance(m, PartitionWritten)]
    per = ", ".join(f"p{m.partition}: {m.rows}" for m in sorted(done, key=lambda m: m.partition))
    return f"{sum(m.rows for m in done)} rows from {len(done)} partitions ({per})"


class DynoQueueWriter(DataSourceWriter):
    """Batch write: every task pushes its partition (see :func:`push_rows`).

    Idempotent by id: a retried task or a re-run job moves existing ids instead of duplicating
    them (a message already delivered and acked is queued again, though).
    """

    def __init__(self, options: SourceOptions, columns: WriteColumns) -> None:
        self.options = options
        self.columns = columns

    def write(self, iterator: Iterator[Any]) -> PartitionWritten:
        """Executor side: push this task's rows (:func:`push_rows`); returns its commit message."""
        return push_rows(self.options, self.columns, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Driver side, every task succeeded: log the rows written per partition."""
        log.info("dynoqueue write to %s committed: %s", self.options.describe(),
                 _summary(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Driver side, the job failed: log what the finished partitions had pushed."""
        failed = sum(1 for m in messages if m is None)
        log.warning("dynoqueue write to %s failed in %d partitions; pushed before: %s",
                    self.options.describe(), failed, _summary(messages))


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
                 batchId, _summary(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Driver side: log what the finished partitions of a failed micro-batch pushed."""
        log.warning("dynoqueue stream write to %s, batch %d aborted; pushed before: %s",
                    self.options.describe(), batchId, _summary(messages))


# ------------------------------------------------------------------------------- stream read


@dataclass(frozen=True)
class StreamKeys:
    """The keys a stream reader adds, all in the queue's Cluster slot (hash tag ``{Q}``).

    * ``P.SPARK.{Q}.<consumer>.PENDING``: zset of recorded, not yet acked batch numbers
      (member and score = the number);
    * ``P.SPARK.{Q}.<consumer>.LAST``: the highest batch number ever recorded;
    * ``P.SPARK.{Q}.<consumer>.BATCH.<n>``: list of the claimed messages of batch n (JSON).

    The tag is always there, so the keys share the slot of a Cluster queue's keys
    (``P.QUEUE.{Q}.S``) and the batch bookkeeping can be one MULTI/EXEC.
    """

    prefix: str
    queue: str
    consumer: str

    @property
    def _base(self) -> str:
        return f"{self.prefix}.SPARK.{{{self.queue}}}.{self.consumer}"

    @property
    def pending(self) -> str:
        """Zset of the recorded, not yet acked batch numbers."""
        return f"{self._base}.PENDING"

    @property
    def last(self) -> str:
        """String: the highest batch number ever recorded."""
        return f"{self._base}.LAST"

    def batch(self, number: int) -> str:
        """List of the claimed messages (JSON) of batch ``number``."""
        return f"{self._base}.BATCH.{number}"


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

    Rows: the :data:`SCHEMA` columns with state ``"unacked"``, ``claimed_at`` (driver time
    just after the claim, so never before the server's claim time) and ``lease_expiry`` (driver
    time just before the claim plus ``leaseMs``: the lease holds at least until then).
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
        query started afresh with the same consumer name replays it), else after the last."""
        conn = self._open().quorum_conn
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
        conn = queues.quorum_conn
        if conn.exists(self.keys.batch(number)):  # recorded, never run: replay it
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
        """
        first, last = self._batch_of(start) + 1, self._batch_of(end)
        conn = self._open().quorum_conn
        step = self.options.split_size
        out: list[RecordedSlice] = []
        for number in range(first, last + 1):
            key = self.keys.batch(number)
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
            Rows in :data:`COLUMNS` order.
        """
        if not isinstance(partition, RecordedSlice):
            return
        with connected(self.options) as queues:
            raws = queues.quorum_conn.lrange(partition.key, partition.start, partition.stop)
        for raw in raws:
            doc = orjson.loads(raw)
            yield (doc["id"], doc.get("payload"), doc.get("priority"), doc.get("timeout"),
                   doc.get("shard"), UNACKED, None, _ts(doc["lease_expiry"]),
                   _ts(doc["claimed_at"]), partition.batch)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark committed every batch up to ``end``: ack their messages, drop their records."""
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
        return int(self._open().quorum_conn.get(self.keys.last) or 0)

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
                              "timeout": m.timeout, "shard": m.shard, "claimed_at": claimed_at,
                              "lease_expiry": lease_expiry}) for m in messages]
        key = self.keys.batch(number)
        conn = self._open().quorum_conn
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
        done = [int(as_text(n)) for n in conn.zrangebyscore(self.keys.pending, "-inf", through)]
        for number in done:
            key = self.keys.batch(number)
            ids = [orjson.loads(raw)["id"] for raw in conn.lrange(key, 0, -1)]
            acked = self._queue().ack_many(ids) if ids else 0
            pipe = conn.pipeline(transaction=True)
            pipe.zrem(self.keys.pending, str(number))
            pipe.delete(key)
            pipe.execute()
            if acked < len(ids):  # leases that ran out: those messages come again later
                log.warning("dynoqueue stream %s: batch %d acked %d of %d (the rest outlived "
                            "their lease and will be delivered again)",
                            self.options.describe(), number, acked, len(ids))

    def _sweep(self) -> None:
        """Put back expired leases of every shard (at most once a second)."""
        if not self.options.process_unacks:
            return
        now = time.monotonic()
        if now - self._last_sweep < _SWEEP_INTERVAL_S:
            return
        self._last_sweep = now
        if not self._sweepers:
            # process_unacks acts on a factory's local shard, and a Spark consumer's leases
            # live in every shard: one factory per zone (built like the others, so a clock or
            # Dynomite profile of the builder applies), or the one factory of a 1-shard queue.
            zones = self.options.zones or ()
            self._sweepers = [open_queues(self.options, unack_timeout_ms=self.options.lease_ms,
                                          local_zone=zone) for zone in zones] or [self._open()]
        for sweeper in self._sweepers:
            try:
                sweeper.get(self.options.queue).process_unacks()
            except DynoQueueError as exc:  # a later trigger tries again
                log.warning("dynoqueue stream %s: unack processing of shard %s failed: %s",
                            self.options.describe(), sweeper.local_shard, exc)
