"""Prometheus metrics for dynoqueue (extra ``metrics``: prometheus-client).

Two kinds, named in :mod:`dynoqueue.metrics.names` and tabled in ``docs/operations.md``:

* counters of what this process did (pushed, delivered, acked, nacked, redelivered,
  dead-lettered, expired, per queue), fed by the core after each successful operation, so
  counting costs no Redis traffic (:class:`QueueMetrics`); handler times of Workers
  (:class:`WorkerMetrics`, a WorkerHooks);
* gauges of what Redis holds, read at scrape time for every queue and shard: waiting, ready,
  delayed, leased, dead, the oldest ready message's age, and delayed messages in Camellia's
  waiting-time buckets (:class:`QueueStatsCollector`), in a bounded number of round trips.

Quick start (sync)::

    from dynoqueue import RedisQueues
    from dynoqueue.metrics import start_http_server

    queues = RedisQueues.from_url("redis://localhost:6379")
    start_http_server(9108, queues)          # http://127.0.0.1:9108/metrics

``dynoqueue serve`` exposes the same names at ``/metrics``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .stats import QueueStats, ReadCost, ShardStats, read_stats, read_stats_async

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from .collector import QueueStatsCollector, SnapshotCollector, families
    from .counters import QueueMetrics, WorkerMetrics

__all__ = [
    "QueueMetrics",
    "QueueStats",
    "QueueStatsCollector",
    "ReadCost",
    "ShardStats",
    "SnapshotCollector",
    "WorkerMetrics",
    "families",
    "read_stats",
    "read_stats_async",
    "start_http_server",
]

#: What needs prometheus-client, imported on first use: the stats reads (and so the ops CLI)
#: work with the core install alone.
_LAZY = {"QueueStatsCollector": "collector", "SnapshotCollector": "collector",
         "families": "collector", "QueueMetrics": "counters", "WorkerMetrics": "counters"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def start_http_server(port: int, queues: Any, *, addr: str = "127.0.0.1",
                      registry: CollectorRegistry | None = None) -> QueueMetrics:
    """Count ``queues``' operations and serve every metric over HTTP from a daemon thread.

    Registers a :class:`QueueMetrics` observing ``queues`` and a :class:`QueueStatsCollector`
    over every queue in Redis, then starts prometheus_client's exposition server.

    Args:
        port: the TCP port, 0..65535 (0: any free one).
        queues: a sync :class:`dynoqueue.RedisQueues`.
        addr: the address to bind (default loopback only).
        registry: where to register (default prometheus_client's global registry; call once
            per registry).

    Returns:
        The counters' object (for ``observe_lateness`` or a second factory's ``observe``).

    Raises:
        ValueError: (prometheus_client's) these metrics are already in ``registry``.
        OSError: the address cannot be bound.
    """
    from prometheus_client import REGISTRY
    from prometheus_client import start_http_server as serve

    from .collector import QueueStatsCollector
    from .counters import QueueMetrics

    registry = REGISTRY if registry is None else registry
    metrics = QueueMetrics(registry).observe(queues)
    registry.register(QueueStatsCollector(queues))
    serve(port, addr=addr, registry=registry)
    return metrics
