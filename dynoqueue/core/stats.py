"""The stats read: what every named queue holds right now, per shard, in a bounded number of
round trips (the core of ``RedisQueues.stats()`` of either API; the records are
:mod:`dynoqueue.model.stats`).

One read of any number of queues costs: the SCAN pages and the registry's ``SMEMBERS`` that list
the queues (only when no names are given; :func:`listing`, over
:func:`dynoqueue.core.listing.queue_names`), one pipeline of the server's ``TIME`` and each
queue's stored policy (which names its partitions and limits) and schedules, and one pipeline of
read-only commands (13 per queue, partition and shard, 3 more per queue and partition); two more
only when a queue has schedules (its tick count). On Redis Cluster redis-py sends each pipeline
to each primary once. Nothing is written and no script runs. A partitioned queue's figures are
summed over its partitions, shard by shard; the partitions' own are in
:attr:`~dynoqueue.model.stats.QueueStats.partitions`.

The plan (:func:`plan`) and the decoding (:func:`decode`) are I/O-free. :func:`measure` is an
operation of Redis-level requests (:mod:`dynoqueue.core.requests`: pipelines on the read role)
that the factory's driver runs as it runs the queues' own operations: under the call's deadline
(``call_timeout_ms``), with the connections' retries and the Cluster client's routing.
:func:`listing` is call-driven (:mod:`dynoqueue.core.calls`), as the listing is.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from redis.exceptions import RedisClusterException, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..errors import AccessDeniedError, InvalidArgumentError, RedisOperationError
from ..model.keys import QueueKeys
from ..model.partitions import partition_keys
from ..model.policy import readable_policy, stored_partitions
from ..model.schedules import Schedule
from ..model.stats import WAITING_BUCKETS, QueueStats, ReadCost, ShardStats
from .calls import CallOp
from .deadline import DeadlinePassed
from .failures import ACCESS_DENIED, timed_out
from .listing import queue_names
from .requests import READ, Op, Pipeline

#: Commands per queue and shard in the pipeline (ZCARD, ZCOUNT ready, oldest, ZCARD unack,
#: one ZCOUNT per waiting-time bucket).
COMMANDS_PER_SHARD = 4 + len(WAITING_BUCKETS)


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


def listing(queues: Any, cost: ReadCost) -> CallOp[list[str]]:
    """Every queue of ``queues`` (a RedisQueues of either API), sorted: the core's listing
    (:func:`dynoqueue.core.listing.queue_names`), each of its calls counted in ``cost`` as one
    round trip and one command (a SCAN page or the registry's ``SMEMBERS``); errors are
    thrown into it, which types them.

    Raises:
        AccessDeniedError: the ACL user may not SCAN.
        RedisOperationError: Redis failed (the error names ``stats``).
    """
    listed = queue_names(queues, "stats")
    try:
        call = next(listed)
        while True:
            cost.round_trips += 1
            cost.commands += 1
            try:
                reply = yield call
            except Exception as exc:
                call = listed.throw(exc)
            else:
                call = listed.send(reply)
    except StopIteration as stop:
        names: list[str] = stop.value
        return names


def measure(queues: Any, names: Sequence[str], cost: ReadCost,
            started: float) -> Op[list[QueueStats]]:
    """The read of ``names`` (none: no request) through ``queues``' driver; ``cost`` gets its
    round trips and commands, and the seconds since ``started`` (``time.perf_counter()``)
    when it ends.

    Raises:
        InvalidArgumentError: ``names`` is a string, not a sequence of names.
        ConfigurationError: a name a queue cannot have (before any request).
        AccessDeniedError, CallTimeoutError, RedisOperationError: the read failed.
    """
    if isinstance(names, (str, bytes)):
        raise InvalidArgumentError(f"names must be a sequence of queue names, got {names!r}")
    wanted = list(names)
    found = (yield from _measure(queues, wanted, cost)) if wanted else []
    cost.seconds = time.perf_counter() - started
    return found


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
