"""Gauges read from Redis at scrape time: a prometheus_client collector over the factory's
stats read (``RedisQueues.stats()``).

:class:`QueueStatsCollector` reads when Prometheus scrapes (a sync factory; the read costs the
round trips :mod:`dynoqueue.core.stats` states). :func:`families` turns stats read elsewhere
(the asyncio server awaits its factory's ``stats()``) into the same metric families.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..model.stats import QueueStats, ReadCost
from . import names as n

_SHARD_GAUGES = (
    (n.WAITING, "waiting", "Messages waiting (ready + delayed), per queue and shard."),
    (n.READY, "ready", "Waiting messages that are due: the next pop may take them."),
    (n.DELAYED, "delayed", "Waiting messages not due yet."),
    (n.LEASED, "leased", "Popped messages not acked yet (in flight)."),
    (n.OLDEST_READY_AGE, "oldest_ready_age_ms",
     "How long the earliest due message has been due, ms (0: none ready)."),
)


def families(stats: Sequence[QueueStats], cost: ReadCost | None = None) -> list[Metric]:
    """The gauge families of ``stats`` (and the read's cost, if given)."""
    shard_families = [(GaugeMetricFamily(name, text, labels=["queue", "shard"]), attr)
                      for name, attr, text in _SHARD_GAUGES]
    dead = GaugeMetricFamily(n.DEAD, "Dead letters kept, per queue.", labels=["queue"])
    paused = GaugeMetricFamily(n.PAUSED, "1 while the queue is paused (its pops deliver "
                               "nothing), else 0.", labels=["queue"])
    waiting_time = GaugeMetricFamily(
        n.WAITING_TIME, "Delayed messages by time until due, in Camellia's waiting-time "
        "buckets (range 0To1min ... 30dayToInfinite).", labels=["queue", "shard", "range"])
    for queue in stats:
        dead.add_metric([queue.queue], queue.dead)
        paused.add_metric([queue.queue], int(queue.paused))
        for shard in queue.shards:
            for family, attr in shard_families:
                family.add_metric([queue.queue, shard.shard], getattr(shard, attr))
            for field, count in shard.waiting_buckets.items():
                waiting_time.add_metric([queue.queue, shard.shard, n.bucket_label(field)], count)
    out: list[Metric] = [*(family for family, _ in shard_families), dead, paused,
                         waiting_time]
    if cost is not None:
        out.append(GaugeMetricFamily(n.SCRAPE_ROUND_TRIPS, "Redis round trips of the last "
                                     "scrape's read.", value=cost.round_trips))
        out.append(GaugeMetricFamily(n.SCRAPE_DURATION, "Seconds the last scrape's read "
                                     "took.", value=cost.seconds))
    return out


class QueueStatsCollector(Collector):
    """Reads every queue's (or the named queues') stats from Redis at each scrape.

    Args:
        queues: a sync :class:`dynoqueue.RedisQueues`.
        names: the queues to report; None: every queue found in Redis at each scrape.

    A failed read (Redis down) raises out of ``collect``: prometheus_client then answers the
    scrape with an error, so the gap shows instead of stale numbers.
    """

    def __init__(self, queues: Any, names: Sequence[str] | None = None) -> None:
        self.queues = queues
        self.names = None if names is None else list(names)
        #: The cost of the last scrape's read.
        self.last_cost = ReadCost()

    def describe(self) -> Iterable[Metric]:
        # Registering would otherwise call collect() (a Redis read) just to learn the names.
        return families([])

    def collect(self) -> Iterable[Metric]:
        cost = ReadCost()
        stats = self.queues.stats(self.names, cost=cost)
        self.last_cost = cost
        return families(stats, cost)


class SnapshotCollector(Collector):
    """Stats already read (e.g. by an asyncio server) exposed as the same gauge families."""

    def __init__(self, stats: Sequence[QueueStats], cost: ReadCost | None = None) -> None:
        self.stats = list(stats)
        self.cost = cost

    def describe(self) -> Iterable[Metric]:
        return families([])

    def collect(self) -> Iterable[Metric]:
        return families(self.stats, self.cost)
