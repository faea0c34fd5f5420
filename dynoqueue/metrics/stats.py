"""What a queue holds right now, per shard, read from Redis in a bounded number of round trips.

One read of any number of queues costs: the SCAN pages and the registry's ``SMEMBERS`` that list
the queues (only when no names are given; :func:`dynoqueue.core.listing.queue_names`), one
``TIME``, and one pipeline of
read-only commands (13 per queue, partition and shard, 3 more per queue and partition), after
the ``TIME``, each queue's stored policy (which names its partitions and limits) and its
schedules in one pipeline. On
Redis Cluster redis-py sends each pipeline to each primary once. Nothing is written and no
script runs. A partitioned queue's figures are summed over its partitions, shard by shard; the
partitions' own are in :attr:`QueueStats.partitions`.

The plan (:func:`plan`) and the decoding (:func:`decode`) are I/O-free. The read goes through
the core: the listing is the core's (queue-level calls, :mod:`dynoqueue.core.listing`), and the
measure is an operation of Redis-level requests (:mod:`dynoqueue.core.requests`: a ``Command``
and a ``Pipeline`` on the read role) that the factory's driver runs as it runs the queues' own
operations: under the call's deadline (``call_timeout_ms``), with the connections' retries and
the Cluster client's routing. :func:`read_stats` reads through a sync factory,
:func:`read_stats_async` through an asyncio one.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import RedisClusterException, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..core import calls
from ..core.calls import CallOp
from ..core.deadline import DeadlinePassed
from ..core.failures import ACCESS_DENIED, timed_out
from ..core.listing import queue_names
from ..core.requests import READ, Op, Pipeline
from ..errors import AccessDeniedError, RedisOperationError
from ..model.keys import QueueKeys
from ..model.partitions import partition_keys
from ..model.policy import QueuePolicy, readable_policy, stored_partitions
from ..model.schedules import Schedule
from .names import WAITING_BUCKETS

#: Commands per queue and shard in the pipeline (ZCARD, ZCOUNT ready, oldest, ZCARD unack,
#: one ZCOUNT per waiting-time bucket).
COMMANDS_PER_SHARD = 4 + len(WAITING_BUCKETS)


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
    """What one read cost Redis: network round trips and commands sent."""

    round_trips: int = 0
    commands: int = 0
    seconds: float = 0.0


def plan(queues: Any, layouts: Sequence[Sequence[QueueKeys]], now_ms: int
         ) -> list[tuple[Any, ...]]:
    """The read-only commands that measure queues at ``now_ms`` (the Redis server's clock).

    Args:
        queues: the factory (its shards).
        layouts: per queue, the keys of each of its partitions
            (:func:`dynoqueue.model.partitions.partition_keys`).
        now_ms: the server's time, epoch ms.

    Returns:
        The commands, in the order :func:`decode` expects their replies.
    """
    commands: list[tuple[Any, ...]] = []
    due_bound = f"({now_ms + 1}"  # due while score < now + 1 (the claim's own test)
    for layout in layouts:
        for keys in layout:
            commands.append(("ZCARD", keys.dead))
            commands.append(("GET", keys.limited))
            commands.append(("EXISTS", keys.paused))
            for shard in queues.shards:
                qkey = keys.queue_shard(shard)
                commands += [("ZCARD", qkey), ("ZCOUNT", qkey, "-inf", due_bound),
                             ("ZRANGE", qkey, 0, 0, "WITHSCORES"),
                             ("ZCARD", keys.unack_shard(shard))]
                for _, low, high in WAITING_BUCKETS:
                    start = now_ms + 1 + low
                    stop = "+inf" if high is None else f"({now_ms + 1 + high}"
                    commands.append(("ZCOUNT", qkey, start, stop))
    return commands


def decode(queues: Any, names: Sequence[str], layouts: Sequence[Sequence[QueueKeys]],
           now_ms: int, replies: Sequence[Any]) -> list[QueueStats]:
    """The stats of ``names`` from the replies to :func:`plan`'s commands for ``layouts``."""
    out: list[QueueStats] = []
    at = 0
    for name, layout in zip(names, layouts, strict=True):
        parts: list[QueueStats] = []
        for index in range(len(layout)):
            dead = int(replies[at])
            limited = int(replies[at + 1] or 0)
            paused = bool(int(replies[at + 2] or 0))
            at += 3
            shards: list[ShardStats] = []
            for shard in queues.shards:
                waiting, ready, oldest, leased = replies[at:at + 4]
                counts = replies[at + 4:at + COMMANDS_PER_SHARD]
                at += COMMANDS_PER_SHARD
                age = 0
                if int(ready) and oldest:
                    score = oldest[0][1] if isinstance(oldest[0], (tuple, list)) else oldest[1]
                    age = max(0, now_ms - int(float(score)))
                shards.append(ShardStats(
                    queue=name, shard=shard, waiting=int(waiting), ready=int(ready),
                    delayed=int(waiting) - int(ready), leased=int(leased),
                    oldest_ready_age_ms=age,
                    waiting_buckets={b[0]: int(n) for b, n in zip(WAITING_BUCKETS, counts,
                                                                    strict=True)}))
            parts.append(QueueStats(queue=name, dead=dead, shards=shards,
                                    partition=index if len(layout) > 1 else None,
                                    limited=limited, paused=paused))
        out.append(parts[0] if len(parts) == 1 else _summed(name, parts))
    return out


def _summed(name: str, parts: list[QueueStats]) -> QueueStats:
    """A partitioned queue's stats: its partitions' summed shard by shard."""
    shards = []
    for i, first in enumerate(parts[0].shards):
        column = [part.shards[i] for part in parts]
        buckets = {b: sum(s.waiting_buckets.get(b, 0) for s in column)
                   for b in first.waiting_buckets}
        shards.append(ShardStats(
            queue=name, shard=first.shard, waiting=sum(s.waiting for s in column),
            ready=sum(s.ready for s in column), delayed=sum(s.delayed for s in column),
            leased=sum(s.leased for s in column),
            oldest_ready_age_ms=max(s.oldest_ready_age_ms for s in column),
            waiting_buckets=buckets))
    return QueueStats(queue=name, dead=sum(p.dead for p in parts), shards=shards,
                      partitions=parts, limited=sum(p.limited for p in parts),
                      paused=any(p.paused for p in parts))


def _counted(listing: CallOp[list[str]], cost: ReadCost) -> CallOp[list[str]]:
    """``listing`` (the core's queue listing), each of its calls counted in ``cost`` as one
    round trip and one command (a SCAN page); errors are thrown into it, which types them."""
    try:
        call = next(listing)
        while True:
            cost.round_trips += 1
            cost.commands += 1
            try:
                reply = yield call
            except Exception as exc:
                call = listing.throw(exc)
            else:
                call = listing.send(reply)
    except StopIteration as stop:
        names: list[str] = stop.value
        return names


def _measure(queues: Any, names: list[str], cost: ReadCost) -> Op[list[QueueStats]]:
    """The read of ``names`` as core requests on the read role: the server's ``TIME`` and the
    queues' stored policies (their partitions) in one pipeline, then :func:`plan`'s commands in
    another (on a Cluster, each sent to each primary once)."""
    try:
        bases = [queues.keys_of(name) for name in names]
        first = yield Pipeline(READ, [("TIME",), *(command for keys in bases for command in (
            ("GET", keys.policy), ("HGETALL", keys.schedules)))])
        (seconds, micros), *stored = first
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        policies, schedules = stored[0::2], stored[1::2]
        layouts = [partition_keys(keys, stored_partitions(raw))
                   for keys, raw in zip(bases, policies, strict=True)]
        commands = plan(queues, layouts, now_ms)
        replies = yield Pipeline(READ, list(commands))
        ticks = yield from _count_ticks(layouts, schedules, cost)
    except ACCESS_DENIED as exc:
        raise AccessDeniedError("stats", "TIME", str(exc)) from exc
    except (DeadlinePassed, RedisTimeoutError) as exc:
        raise timed_out("stats", names[0], exc) from exc
    except (RedisError, RedisClusterException) as exc:
        raise RedisOperationError("stats", names[0], str(exc)) from exc
    cost.round_trips += 2
    cost.commands += 1 + 2 * len(names) + len(commands)
    # Unreadable records are left out: the queue's own calls say what is wrong.
    return [dataclasses.replace(
                stats, policy=readable_policy(raw), ticks=count,
                schedules=[s.as_of(now_ms) for s in Schedule.all_from(found,
                                                                      skip_unreadable=True)])
            for stats, raw, found, count in zip(
                decode(queues, names, layouts, now_ms, replies), policies, schedules, ticks,
                strict=True)]


def _count_ticks(layouts: Sequence[Sequence[QueueKeys]], schedules: Sequence[Any],
                 cost: ReadCost) -> Op[list[int]]:
    """Per queue, how many of its messages are schedule ticks: the ids in each partition's
    tick log (``P.TICKS.Q``) that still have a payload. Two more round trips, only when a
    queue has schedules."""
    counts = [0] * len(layouts)
    logs = [(i, keys) for i, (layout, found) in enumerate(zip(layouts, schedules, strict=True))
            if found for keys in layout]
    if not logs:
        return counts
    members = yield Pipeline(READ, [("ZRANGE", keys.ticks, 0, -1) for _, keys in logs])
    asks = [(i, keys, ids) for (i, keys), ids in zip(logs, members, strict=True) if ids]
    cost.round_trips += 1
    cost.commands += len(logs)
    if asks:
        found = yield Pipeline(READ, [("HMGET", keys.message_hash, *ids) for _, keys, ids in asks])
        cost.round_trips += 1
        cost.commands += len(asks)
        for (i, _, _), payloads in zip(asks, found, strict=True):
            counts[i] += sum(p is not None for p in payloads)
    return counts


async def list_queues_async(queues: Any) -> list[str]:
    """Every queue under the prefix of an asyncio factory (a SCAN; see
    :func:`dynoqueue.core.listing.queue_names`), sorted.

    Raises:
        AccessDeniedError, RedisOperationError: as :func:`read_stats`.
    """
    return await calls.run_async(queue_names(queues, "list_queues"))


def read_stats(queues: Any, names: Sequence[str] | None = None,
               cost: ReadCost | None = None) -> list[QueueStats]:
    """Read the stats of queues of a sync :class:`dynoqueue.RedisQueues`, now.

    Args:
        queues: the factory (its key prefix, shards, read client and driver are used).
        names: the queues to read; None: every queue found in Redis (a SCAN) or registered.
        cost: filled with the round trips and commands this read cost, if given.

    Returns:
        One :class:`QueueStats` per queue, in the order of ``names`` (sorted when listed).

    Raises:
        AccessDeniedError: wrong password, unknown user or a missing ACL permission.
        RedisOperationError: Redis failed or cannot be reached.
    """
    cost = cost if cost is not None else ReadCost()
    started = time.perf_counter()
    if names is None:
        names = calls.run(_counted(queue_names(queues, "stats"), cost))
    stats: list[QueueStats] = []
    if names:
        # The factory's driver runs the read as it runs the queues' operations: under the
        # call's deadline, with the connections' retries and the Cluster client's routing.
        stats = queues._driver.run(_measure(queues, list(names), cost))
    cost.seconds = time.perf_counter() - started
    return stats


async def read_stats_async(queues: Any, names: Sequence[str] | None = None,
                           cost: ReadCost | None = None) -> list[QueueStats]:
    """:func:`read_stats` for a :class:`dynoqueue.asyncio.RedisQueues` (same arguments)."""
    cost = cost if cost is not None else ReadCost()
    started = time.perf_counter()
    if names is None:
        names = await calls.run_async(_counted(queue_names(queues, "stats"), cost))
    stats: list[QueueStats] = []
    if names:
        stats = await queues._driver.run(_measure(queues, list(names), cost))
    cost.seconds = time.perf_counter() - started
    return stats
