"""What a queue holds at one instant, as the stats read reports it (no I/O): the records
(:class:`QueueStats`, :class:`ShardStats`), what a read cost (:class:`ReadCost`), and
Camellia's waiting-time buckets that the read counts delayed messages in.

The read itself is :mod:`dynoqueue.core.stats`, run by ``RedisQueues.stats()`` of either API.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .policy import QueuePolicy
from .schedules import Schedule

#: One minute, one hour and one day, ms (the buckets' bounds).
MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
DAY_MS = 24 * HOUR_MS

#: Camellia's waitingQueueInfo buckets: (its field name, from ms, to ms (None: no end)), the
#: time until a delayed message falls due.
WAITING_BUCKETS: tuple[tuple[str, int, int | None], ...] = (
    ("sizeOf0To1min", 0, MINUTE_MS),
    ("sizeOf1minTo10min", MINUTE_MS, 10 * MINUTE_MS),
    ("sizeOf10minTo30min", 10 * MINUTE_MS, 30 * MINUTE_MS),
    ("sizeOf30minTo1hour", 30 * MINUTE_MS, HOUR_MS),
    ("sizeOf1hourTo6hour", HOUR_MS, 6 * HOUR_MS),
    ("sizeOf6hourTo1day", 6 * HOUR_MS, DAY_MS),
    ("sizeOf1dayTo7day", DAY_MS, 7 * DAY_MS),
    ("sizeOf7dayTo30day", 7 * DAY_MS, 30 * DAY_MS),
    ("sizeOf30dayToInfinite", 30 * DAY_MS, None),
)


@dataclass(frozen=True)
class ShardStats:
    """One shard of one queue at one instant.

    Attributes:
        queue, shard: the names.
        waiting: messages waiting (``P.QUEUE.Q.S``): ready + delayed.
        ready: waiting and due (the next pop may take them).
        delayed: waiting, not due yet.
        leased: popped, not acked yet (``P.UNACK.Q.S``).
        oldest_ready_age_ms: how long the earliest due message has been due, ms (0: none).
        waiting_buckets: delayed messages by time until due, keyed by Camellia's field names
            (``sizeOf0To1min`` ... ``sizeOf30dayToInfinite``).
    """

    queue: str
    shard: str
    waiting: int
    ready: int
    delayed: int
    leased: int
    oldest_ready_age_ms: int
    waiting_buckets: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class QueueStats:
    """One queue: its shards and its dead letters (kept per queue, not per shard).

    Attributes:
        queue: the name.
        dead: dead letters.
        shards: one :class:`ShardStats` per shard (a partitioned queue's summed over its
            partitions; the oldest ready age is the oldest of any partition).
        partitions: a partitioned queue's partitions, each a QueueStats of its own (with
            ``partition`` set), in partition order; empty for a queue of one partition.
        partition: which partition of its queue these figures are (0-based), or None for a
            whole queue.
        policy: the queue's stored policy (its limits among it), None when none is stored.
        limited: claims the queue's limits held back while a message was due, since the
            queue's last ``clear()`` (every process's: a counter in Redis).
        schedules: the queue's recurring schedules, by id.
        paused: the queue is paused (``DynoQueue.pause()``; a partitioned queue: any
            partition).
        ticks: how many of the queue's messages (waiting or leased) are ticks of its
            schedules (counted in the totals like any message).
    """

    queue: str
    dead: int
    shards: list[ShardStats]
    partitions: list[QueueStats] = field(default_factory=list)
    partition: int | None = None
    policy: QueuePolicy | None = None
    limited: int = 0
    schedules: list[Schedule] = field(default_factory=list)
    paused: bool = False
    ticks: int = 0

    def total(self, name: str) -> int:
        """The sum over shards of ``name`` (waiting, ready, delayed or leased)."""
        return sum(int(getattr(s, name)) for s in self.shards)

    @property
    def oldest_ready_age_ms(self) -> int:
        """The oldest ready message's age over every shard, ms (0: none is ready)."""
        return max((s.oldest_ready_age_ms for s in self.shards), default=0)

    def buckets(self) -> dict[str, int]:
        """The waiting-time buckets summed over shards (Camellia's ``waitingQueueInfo``)."""
        out = {name: 0 for name, _, _ in WAITING_BUCKETS}
        for shard in self.shards:
            for name, count in shard.waiting_buckets.items():
                out[name] += count
        return out


@dataclass
class ReadCost:
    """What one read cost Redis: network round trips and commands sent, and its wall time.

    Attributes:
        round_trips: network round trips (SCAN pages, pipelines).
        commands: commands sent.
        seconds: how long the read took, s.
    """

    round_trips: int = 0
    commands: int = 0
    seconds: float = 0.0
