"""In-process counters and histograms: what this process's queues and Workers did.

:class:`QueueMetrics` observes a factory's events (:meth:`RedisQueues.set_events`): the core
tells it, after each successful operation, what happened to how many messages, so counting
adds no Redis traffic. :class:`WorkerMetrics` is a :class:`~dynoqueue.worker.WorkerHooks` that
times handlers.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram

from ..core.preflight import EVICTED
from ..model.message import Message
from ..worker.hooks import WorkerHooks
from .names import (
    COUNTERS,
    EVICTED_KEYS,
    HANDLER_DURATION,
    HANDLER_OUTCOMES,
    LATE_EVENT,
    LATENESS,
)

#: Histogram buckets of delivery lateness, seconds (a healthy queue sits in the first ones).
LATENESS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                    10.0, 30.0, 60.0, 300.0)
#: Histogram buckets of handler run time, seconds.
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                    60.0, 300.0)

_HELP = {
    "pushed": "Messages pushed (stored and queued) by this process.",
    "delivered": "Messages leased to consumers of this process (each delivery counts).",
    "acked": "Leases acked by this process.",
    "nacked": "Leases nacked by this process (due again after their delay).",
    "redelivered": "Expired leases put back by this process's unack processing.",
    "dead_lettered": "Messages this process dead-lettered (max deliveries, TTL after "
                     "delivery, undecodable, dead_letter()).",
    "expired": "Messages whose TTL ran out before any delivery (found by this process).",
    "payload_missing": "Ids this process found without payload (evicted) and dead-lettered "
                       "with reason payload-missing; also counted as dead_lettered.",
    "limited": "Claims of this process that the queue's limits (max_in_flight, rate_limit) "
               "held back while a message was due.",
}


class QueueMetrics:
    """The per-queue counters of one process, fed by the core's events.

    Use :meth:`observe` to count a factory's operations (``metrics.observe(queues)``), or
    pass the instance to ``queues.set_events`` yourself: it is the ``events(queue, kind,
    count)`` callable.

    Args:
        registry: where the metrics are registered (default: prometheus_client's global
            registry; one QueueMetrics per registry).

    Raises:
        ValueError: (prometheus_client's) these metrics are already in ``registry``.
    """

    def __init__(self, registry: CollectorRegistry | None = REGISTRY) -> None:
        self.registry = registry
        self.counters: dict[str, Counter] = {
            kind: Counter(name, _HELP[kind], ["queue"], registry=registry)
            for kind, name in COUNTERS.items()}
        self.lateness = Histogram(
            LATENESS, "Delivery lateness: when a pop of this process leased a message minus "
            "when it fell due (every delivery counts).", ["queue"],
            buckets=LATENESS_BUCKETS, registry=registry)
        self.evicted = Counter(
            EVICTED_KEYS, "Keys the Redis server evicted (maxmemory-policy allkeys-*, allowed "
            "with eviction_check='warn'), seen by this process's unack passes.",
            ["deployment"], registry=registry)

    def __call__(self, queue: str, kind: str, count: int) -> None:
        if kind == LATE_EVENT:  # count: one delivery's lateness in ms (0 counts too)
            self.lateness.labels(queue).observe(count / 1000)
        elif kind == EVICTED:  # queue: the deployment
            if count > 0:
                self.evicted.labels(queue).inc(count)
        elif count > 0:
            counter = self.counters.get(kind)
            if counter is not None:
                counter.labels(queue).inc(count)

    def observe(self, queues: Any) -> QueueMetrics:
        """Count the operations of ``queues`` (a RedisQueues of either API) from now on.

        Returns:
            This object.
        """
        queues.set_events(self)
        return self

    def observe_lateness(self, queue: str, seconds: float) -> None:
        """Record one delivery that came ``seconds`` after its message fell due (>= 0)."""
        self.lateness.labels(queue).observe(max(0.0, seconds))


class WorkerMetrics(WorkerHooks):
    """Worker hooks that time handlers and count their outcomes.

    Args:
        queue: the queue name the Worker consumes (the ``queue`` label).
        registry: where the histogram and counter live; several WorkerMetrics may share one
            registry (the metrics are made once per registry).
    """

    #: The metrics made so far, per registry (a registry refuses a second copy of a name).
    _shared: dict[object, tuple[Histogram, Counter]] = {}

    def __init__(self, queue: str, registry: CollectorRegistry | None = REGISTRY) -> None:
        self.queue = queue
        key: object = registry if registry is not None else self
        if key not in self._shared:
            self._shared[key] = (
                Histogram(HANDLER_DURATION, "Handler run time of Worker deliveries (any "
                          "outcome).", ["queue"], buckets=DURATION_BUCKETS, registry=registry),
                Counter(HANDLER_OUTCOMES, "What Workers did with each delivery: acked, "
                        "retried (nack), dead_lettered.", ["queue", "outcome"],
                        registry=registry))
        self.duration, self.outcomes = self._shared[key]

    def on_acked(self, message: Message) -> None:
        self.outcomes.labels(self.queue, "acked").inc()

    def on_nacked(self, message: Message, delay_ms: int, error: str | None) -> None:
        self.outcomes.labels(self.queue, "retried").inc()

    def on_dead_lettered(self, message: Message, reason: str, error: str | None) -> None:
        self.outcomes.labels(self.queue, "dead_lettered").inc()

    def on_handler_duration(self, message: Message, seconds: float) -> None:
        self.duration.labels(self.queue).observe(seconds)
