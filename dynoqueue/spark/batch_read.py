"""Batch read of the ``dynoqueue`` format: a snapshot of a queue, split into rank ranges.

``partitions()`` runs in a Python worker of the driver; ``read()`` in executor tasks, each of
which opens its own connection (redis-py clients cannot be pickled) and closes it before it
returns. Besides each message's zset entry and stored JSON, a row carries its lifecycle: the
state by Camellia's name, the delivery count and last error of its ``P.LIFE.Q`` record, its
own limit from its ``P.BORN.Q`` entry (or an older version's record) and its TTL expiry from
``P.EXPIRY.Q``, all read in one pipelined round trip per chunk of ids.

A waiting message lives in exactly one of its shard's queue zset (``P.QUEUE.Q.S``), ready
zset (``P.READY.Q.S``: due, strict priority) or its ordered group's line (``P.GLINE.Q.G``:
behind the group's current message; the group's shard is its current message's); a leased one
in the unack zset. The read covers all of them (the lines of every group in ``P.GHEAD.Q``), so
every message shows exactly once.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition

from .. import MessageState, QueuePolicy
from ..errors import InvalidMessageError
from ..model.keys import QueueKeys
from ..model.message import Message, as_text
from ..model.partitions import partition_keys
from ..model.policy import stored_partitions
from ..model.states import decode_record
from .options import SourceOptions, connected
from .redis_errors import redis_errors, server_ms
from .rows import UNACKED, WAITING, timestamp

log = logging.getLogger("dynoqueue.spark")

#: Ids per pipelined lookup of their JSON, lifecycle record and expiry (one round trip); also
#: groups per pipelined lookup of their shard and line length when planning.
LOOKUP_CHUNK = 1000

_LEASED = MessageState.LEASED.name
_READY = MessageState.READY.name
_DELAYED = MessageState.DELAYED.name

#: The zsets of a shard a batch read covers: (kind, ``state`` column); and the group lines.
QUEUE, READY, UNACK, GROUP = "queue", "ready", "unack", "group"
_KINDS = ((QUEUE, WAITING), (READY, WAITING), (UNACK, UNACKED))
#: A ready zset score is ``priority * 2**42 + due ms`` (``READY_SCALE`` in scripts/lib/strict.lua).
READY_SCALE = 2 ** 42


def rank_ranges(size: int, step: int) -> list[tuple[int, int]]:
    """``[(start, stop), ...]``: ranks ``0..size-1`` in inclusive ranges of at most ``step``."""
    return [(lo, min(lo + step, size) - 1) for lo in range(0, size, step)]


@dataclass
class ZsetRange(InputPartition):
    """One batch-read partition: ranks ``start..stop`` (inclusive) of one shard's zset.

    Attributes:
        shard: the shard name.
        state: ``"waiting"`` (the queue, ready or group line zset) or ``"unacked"`` (the unack
            zset).
        key: the zset's key.
        start: first rank, >= 0.
        stop: last rank, inclusive.
        now_ms: the read's "now" (the Redis server's TIME when the read was planned, epoch
            ms): a waiting message due by then is READY, a later one DELAYED, in every
            partition alike.
        policy_max_deliveries: the stored queue policy's ``max_deliveries`` (0: none), for
            messages without a limit of their own.
        kind: which zset: ``"queue"`` (score due ms + priority/100), ``"ready"`` (strict
            priority, score priority * 2**42 + due ms) or ``"unack"`` (score lease expiry ms).
        tag: the hash tag of the queue partition read, "" for a queue of one partition.
    """

    shard: str
    state: str
    key: str
    start: int
    stop: int
    now_ms: int
    policy_max_deliveries: int
    kind: str = QUEUE
    tag: str = ""


@dataclass
class LineRanges(InputPartition):
    """One batch-read partition of ordered group lines (``P.GLINE.Q.G``) of one shard: rank
    ranges of several lines, up to ``splitSize`` ids in all (a line longer than that is split
    over partitions).

    Attributes:
        shard: the shard name (the groups' shard).
        ranges: ``(group, start, stop)`` triples: ranks ``start..stop`` (inclusive) of the
            group's line (score due ms; member push sequence, priority, id).
        now_ms: the read's "now" (see :class:`ZsetRange`).
        policy_max_deliveries: the stored queue policy's ``max_deliveries`` (0: none).
        tag: the hash tag of the queue partition read (a partitioned queue's, see
            :func:`dynoqueue.model.partitions.partition_keys`), "" for a queue of one.
    """

    shard: str
    ranges: tuple[tuple[str, int, int], ...]
    now_ms: int
    policy_max_deliveries: int
    state: str = WAITING
    kind: str = GROUP
    tag: str = ""


class DynoQueueReader(DataSourceReader):
    """Batch read: a snapshot of a queue, one partition per ``splitSize`` ids of each shard zset.

    Read-only. Reads go to the non-quorum connection (the local zone's replica when
    ``replicaUrls`` names one). Each partition is consistent in itself; a message that moves
    while the partitions are being read (popped, acked, put back) may be missed or seen twice.
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> list[ZsetRange | LineRanges]:
        """Plan the read: ZCARD every shard's queue, ready and unack zsets (empty ones cost
        nothing, so queues without strict priority get no more partitions), split into rank
        ranges; find every ordered group's line (the groups of ``P.GHEAD.Q``, their shard from
        the current message's ``P.GROUPOF.Q`` record) and its length, packed into partitions
        of up to ``splitSize`` ids per shard; read the server's time and the stored queue
        policy once for all partitions. A partitioned queue (``QueuePolicy.partitions``, from
        the stored policy) is planned partition by partition: at least one Spark partition per
        non-empty queue partition, so the tasks read every primary of a cluster at once.

        Returns:
            The partitions (empty for an empty queue).

        Raises:
            RedisOperationError: Redis failed (the read fails before any task runs).
            ConfigurationError: the stored queue policy is unreadable.
        """
        with connected(self.options) as queues:
            queue = queues.get(self.options.queue)
            conn = queues.non_quorum_conn
            with redis_errors("spark_read_partitions", queue.keys.policy, self.options):
                stored_policy = conn.get(queue.keys.policy)
            # A partitioned queue: every partition's zsets, each partition its own tasks, so
            # the tasks read all of a cluster's primaries at once.
            layout = partition_keys(queue.keys, stored_partitions(stored_policy))
            plan = [(keys.tag, shard, kind, state, _zset(keys, kind, shard))
                    for keys in layout for shard in queue.shards for kind, state in _KINDS]
            pipe = conn.pipeline(transaction=False)
            for *_, key in plan:
                pipe.zcard(key)
            with redis_errors("spark_read_partitions", plan[0][4], self.options):
                sizes = pipe.execute()
                lines = [(keys.tag, _group_lines(conn, keys, queue.shards)) for keys in layout]
            now_ms = server_ms(conn, "spark_read_partitions", plan[0][4], self.options)
        policy_max = QueuePolicy.from_json(stored_policy).max_deliveries if stored_policy else 0
        out: list[ZsetRange | LineRanges] = [
            ZsetRange(shard, state, key, lo, hi, now_ms, policy_max, kind, tag)
            for (tag, shard, kind, state, key), size in zip(plan, sizes, strict=True)
            for lo, hi in rank_ranges(int(size), self.options.split_size)]
        step = self.options.split_size
        for tag, by_shard in lines:
            for shard in queue.shards:
                packed: list[tuple[str, int, int]] = []
                held = 0
                for group, first, size in by_shard.get(shard, []):
                    for lo, hi in rank_ranges(size, step):
                        packed.append((group, first + lo, first + hi))
                        held += hi - lo + 1
                        if held >= step:
                            out.append(LineRanges(shard, tuple(packed), now_ms, policy_max,
                                                  tag=tag))
                            packed, held = [], 0
                if packed:
                    out.append(LineRanges(shard, tuple(packed), now_ms, policy_max, tag=tag))
        return out

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        """Read one rank range: ids and scores, then, per chunk of :data:`LOOKUP_CHUNK` ids,
        their stored JSON, lifecycle records and TTL expiries in one pipelined round trip.

        Yields:
            Rows in :data:`~dynoqueue.spark.rows.COLUMNS` order. An id whose payload is gone
            (stale) has null payload, priority and timeout.

        Raises:
            RedisOperationError: Redis failed (Spark retries the task).
        """
        if not isinstance(partition, ZsetRange | LineRanges):  # Spark's "no partitions"
            return
        with connected(self.options) as queues:
            conn = queues.non_quorum_conn
            keys = queues.get(self.options.queue).keys
            if partition.tag:  # a partition of a partitioned queue
                keys = dataclasses.replace(keys, tag=partition.tag)
            if isinstance(partition, ZsetRange):
                with redis_errors("spark_read", partition.key, self.options):
                    scored = conn.zrange(partition.key, partition.start, partition.stop,
                                         withscores=True)
                entries = [_entry(partition.kind, member, float(score))
                           for member, score in scored]
            else:
                pipe = conn.pipeline(transaction=False)
                for group, start, stop in partition.ranges:
                    pipe.zrange(keys.group_line(group), start, stop, withscores=True)
                with redis_errors("spark_read", keys.group_line_base, self.options):
                    lines = pipe.execute()
                entries = [_line_entry(group, member, float(score))
                           for (group, _, _), scored in zip(partition.ranges, lines, strict=True)
                           for member, score in scored]
            for i in range(0, len(entries), LOOKUP_CHUNK):
                chunk = entries[i:i + LOOKUP_CHUNK]
                ids = [entry.id for entry in chunk]
                pipe = conn.pipeline(transaction=False)
                pipe.hmget(keys.message_hash, ids)
                pipe.hmget(keys.life, ids)
                pipe.hmget(keys.born, ids)
                pipe.zmscore(keys.expiry, ids)
                with redis_errors("spark_read", keys.message_hash, self.options):
                    raws, lives, borns, expiries = pipe.execute()
                for entry, raw, life, born, expires in zip(chunk, raws, lives, borns, expiries,
                                                           strict=True):
                    yield self._row(partition, entry, raw, life, born, expires)

    @staticmethod
    def _row(p: ZsetRange | LineRanges, entry: _Entry, raw: Any, life: Any, born: Any,
             expires: float | None) -> tuple[Any, ...]:
        message_id = entry.id
        payload = priority = timeout = headers = None
        group = entry.group
        if raw is not None:
            try:
                message = Message.from_json(raw)
                payload, priority, timeout = message.payload, message.priority, message.timeout
                group, headers = message.group, message.headers
            except InvalidMessageError as exc:
                log.warning("unreadable stored message %r: %s", message_id, exc)
        waiting = p.state == WAITING
        due = timestamp(entry.due_ms) if waiting else None
        lease = None if waiting else timestamp(entry.score)
        if not waiting:
            state = _LEASED
        else:  # due once due < now + 1, as the claim scripts and info() decide
            state = _READY if entry.due_ms < p.now_ms + 1 else _DELAYED
        rec = decode_record(life, born)
        own_max = rec.get("m")
        max_deliveries = int(own_max) if own_max is not None else (p.policy_max_deliveries
                                                                   or None)
        last_error = rec.get("l")
        return (message_id, payload, priority, timeout, p.shard, p.state, due, lease, None,
                None, state, int(rec.get("d") or 0), max_deliveries, timestamp(expires),
                None if last_error is None else str(last_error), group, headers)


@dataclass(frozen=True)
class _Entry:
    """One zset entry, decoded: the id, its due ms (waiting) or lease expiry (``score``,
    unack), and the group a group line member names."""

    id: str
    score: float
    due_ms: float
    group: str | None = None


def _zset(keys: QueueKeys, kind: str, shard: str) -> str:
    """The key of ``shard``'s zset of ``kind`` (queue, ready or unack)."""
    if kind == READY:
        return keys.ready_shard(shard)
    return keys.unack_shard(shard) if kind == UNACK else keys.queue_shard(shard)


def _group_lines(conn: Any, keys: QueueKeys,
                 shards: Sequence[str]) -> dict[str, list[tuple[str, int, int]]]:
    """``{shard: [(group, first rank, waiting), ...]}``: every ordered group with messages
    waiting behind its current one, by the shard of its current message. The current
    message's record (``P.GROUPOF.Q``, read as bytes: it holds byte 255) starts with the due ms
    (16 digits), the sequence (16), the shard index (3, 1-based) and the priority (2); when
    its line member (sequence, priority, id) is in the line, it marks the end of the members
    delivered before (stale: group_insert in scripts/lib/groups.lua), and the waiting ones
    follow."""
    heads = [(as_text(g), i if isinstance(i, bytes) else i.encode())
             for g, i in conn.hscan_iter(keys.group_head, count=LOOKUP_CHUNK)]
    out: dict[str, list[tuple[str, int, int]]] = {}
    for i in range(0, len(heads), LOOKUP_CHUNK):
        chunk = heads[i:i + LOOKUP_CHUNK]
        pipe = conn.pipeline(transaction=False)
        pipe.hmget(keys.group_of, [head for _, head in chunk])
        for group, _ in chunk:
            pipe.zcard(keys.group_line(group))
        recs, *sizes = pipe.execute()
        pipe = conn.pipeline(transaction=False)
        for (group, head), rec in zip(chunk, recs, strict=True):
            if rec is not None:
                pipe.zrank(keys.group_line(group), rec[16:32] + rec[35:37] + head)
        marks = iter(pipe.execute())
        for (group, _), rec, size in zip(chunk, recs, sizes, strict=True):
            if rec is None:
                continue
            mark = next(marks)
            first = 0 if mark is None else int(mark) + 1
            index = int(rec[32:35]) - 1
            if int(size) > first and 0 <= index < len(shards):
                out.setdefault(shards[index], []).append((group, first, int(size) - first))
    return out


def _line_entry(group: str, member: bytes | str, score: float) -> _Entry:
    """Decode an entry of ``group``'s line: score due ms; member the push sequence (16 digits),
    the priority (2), the id (group_insert in scripts/lib/groups.lua)."""
    return _Entry(as_text(member)[18:], score, score, group)


def _entry(kind: str, member: bytes | str, score: float) -> _Entry:
    """Decode a zset entry of ``kind`` (see :class:`ZsetRange`)."""
    message_id = as_text(member)
    if kind == READY:  # priority * 2**42 + due ms, exact in a double
        return _Entry(message_id, score, score - math.floor(score / READY_SCALE) * READY_SCALE)
    # A queue score is due ms + priority/100; an unack score is the lease expiry in ms.
    return _Entry(message_id, score, math.floor(score))
