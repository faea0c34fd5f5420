"""RedisQueues: the factory that hands out one DynoQueue per name and runs the unack reprocessor.

Mirrors dyno-queues' ``RedisQueues``: it holds the quorum connection (writes and claims), the
non-quorum connection (cheap local reads), the shard supplier and the sharding strategy, and one
daemon thread that periodically puts back messages whose lease expired, for every queue it
created, on the local shard. :class:`dynoqueue.asyncio.RedisQueues` is its asyncio twin.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Unpack

from redis.cluster import RedisCluster

from .connect import builders
from .core import stats as stats_read
from .core.calls import outcome, run
from .core.factory import QueuesBase
from .core.listing import queue_names
from .core.requests import Step
from .io.sync import SyncDriver
from .model.settings import QueueOptions
from .model.sharding import ShardSupplier
from .model.stats import QueueStats, ReadCost
from .queue import DynoQueue

log = logging.getLogger("dynoqueue.queues")


class RedisQueues(QueuesBase[DynoQueue]):
    """Factory of named queues sharing connections, shards and settings.

    Mirrors ``com.netflix.dyno.queues.redis.RedisQueues``. A context manager: leaving the
    ``with`` block calls :meth:`close`.

    Args:
        quorum_conn: redis-py client for writes and claims (``redis.Redis`` on the primary, or
            ``redis.cluster.RedisCluster``), with or without ``decode_responses``.
        non_quorum_conn: redis-py client for cheap reads (usually the local zone's replica);
            may be the same object as ``quorum_conn``.
        key_prefix: prefix of every key (dyno-queues' ``redisKeyPrefix``); no braces/whitespace.
        shard_supplier: names all shards and the local one (see :mod:`dynoqueue.model.sharding`).
        **options: the settings, each optional (:class:`~dynoqueue.model.settings.QueueOptions`):
            ``unack_timeout_ms`` (lease a pop takes, ms, >= 1, default 60 000),
            ``unack_handler_interval_ms`` (reprocessor period, ms; 0 disables the thread;
            default 60 000), ``sharding_strategy`` (default round robin), ``write_quorum``
            (``WAIT n`` after each write, >= 0; fewer acknowledgements raise
            :class:`~dynoqueue.errors.QuorumNotReachedError`; claims and unack re-queues do
            not wait; pair it with the server's ``min-replicas-to-write``),
            ``write_quorum_timeout_ms`` (default 100), ``clock`` (callable returning epoch ms,
            replacing the server's TIME), ``max_payload_bytes`` (default 1 MiB),
            ``poll_interval_ms`` (longest sleep of a waiting pop that no doorbell wakes,
            default 1 000), ``hash_tag`` (Cluster hash tags; default on for a RedisCluster),
            ``doorbell`` (pub/sub doorbell; False for Dynomite), ``orphan_shard_grace_ms``
            (how long a zone may go without a live factory before the others adopt its shard,
            ms, >= 0, default 30 000; 0: never), ``call_timeout_ms`` (the deadline of every call,
            default 10 000: past it a call raises :class:`~dynoqueue.errors.CallTimeoutError`;
            a waiting pop gets its wait plus that), ``eviction_check``
            (``"refuse"``, the default, ``"warn"`` or ``"off"``: what the first call does when
            the server's ``maxmemory-policy`` may evict queue keys, ``allkeys-*``),
            ``reply_spin_us`` (how long a thread busy-polls for a script call's reply before
            sleeping, us, 0..10 000, default 200; 0: never; Linux with 2+ CPUs only).

    The builders :meth:`from_url`, :meth:`from_sentinel` and :meth:`from_cluster` make the
    connections from addresses (TLS and ACL users included) and close them on :meth:`close`.

    Raises:
        ConfigurationError: (a ValueError) an argument is out of range or inconsistent.
    """

    queue_class = DynoQueue
    cluster_class = RedisCluster
    driver_class = SyncDriver
    _driver: SyncDriver

    def __init__(self, quorum_conn: Any, non_quorum_conn: Any, *, key_prefix: str,
                 shard_supplier: ShardSupplier, **options: Unpack[QueueOptions]) -> None:
        super().__init__(quorum_conn, non_quorum_conn, key_prefix=key_prefix,
                         shard_supplier=shard_supplier, **options)
        self._stop = threading.Event()
        self._reprocessor: threading.Thread | None = None
        if self.unack_handler_interval_ms > 0:
            self._reprocessor = threading.Thread(
                target=self._reprocess_loop, name="dynoqueue-unack-reprocessor", daemon=True)
            self._reprocessor.start()

    def _new_driver(self, quorum_conn: Any, non_quorum_conn: Any) -> SyncDriver:
        return SyncDriver(quorum_conn, non_quorum_conn, self.settings.call_timeout_s,
                          reply_spin_us=self.settings.reply_spin_us)

    @classmethod
    def from_url(cls, url: str, *, zones: Sequence[str] | None = None,
                 local_zone: str | None = None, replica_urls: Mapping[str, str] | None = None,
                 **kwargs: Any) -> RedisQueues:
        """Build from a deployment URL: ``redis://``, ``rediss://``, ``unix://``,
        ``redis+sentinel://``, ``redis+cluster://`` (TLS: ``rediss...``). See
        :func:`dynoqueue.connect.builders.from_url` for every argument (``key_prefix``,
        ``retry``, ``client_options``, ``read_from_replicas``, ``dynomite``, and the
        settings of :class:`~dynoqueue.model.settings.QueueOptions`).

        Raises:
            ConfigurationError: a bad URL or setting.
            RedisOperationError: (cluster URLs) no node could be reached or logged in to.
        """
        return builders.from_url(cls, url, zones=zones, local_zone=local_zone,
                                 replica_urls=replica_urls, **kwargs)

    @classmethod
    def from_sentinel(cls, sentinels: Any, service_name: str, **kwargs: Any) -> RedisQueues:
        """Build on a Sentinel-managed primary that is followed through failovers. See
        :func:`dynoqueue.connect.builders.from_sentinel`.

        Raises:
            ConfigurationError: a bad sentinel list or setting.
        """
        return builders.from_sentinel(cls, sentinels, service_name, **kwargs)

    @classmethod
    def from_cluster(cls, nodes: Any, **kwargs: Any) -> RedisQueues:
        """Build on a Redis Cluster, one hash slot per queue, reads on replicas. See
        :func:`dynoqueue.connect.builders.from_cluster`.

        Raises:
            ConfigurationError: a bad address or setting.
            RedisOperationError: no node could be reached or logged in to.
        """
        return builders.from_cluster(cls, nodes, **kwargs)

    def process_unacks(self) -> int:
        """Run one unack pass now (what the reprocessor thread does): write this zone's
        heartbeat, then put back expired leases on the local shard and on every orphaned shard
        this factory adopts, for every queue it opened and every queue in the registry
        ``P.QUEUES`` (see docs/semantics.md, "Zone loss"). Mirrors ``processUnacks`` run
        for all queues.

        Errors of one queue are logged and do not stop the others.

        Returns:
            How many messages were put back in all.
        """
        return self._driver.run(self._unack_pass())

    def run_schedules(self) -> int:
        """Run one schedule pass now (what the reprocessor does after each unack pass): every
        queue with schedules (``P.SCHEDULED.QUEUES``) tops each schedule up to its next two
        ticks not due yet (and queues missed ones as its ``catch_up`` says), each tick once
        however many factories run passes (docs/semantics.md, "Schedules"). Errors of one
        queue are logged and do not stop the others. Mirrors the scheduler loop of bullmq's
        job schedulers.

        Returns:
            How many tick messages were queued in all.
        """
        return self._driver.run(self._schedules_pass())

    def ping(self) -> dict[str, float]:
        """Check every connection the queues use, in one call: the quorum connection, the
        non-quorum (read) connection and, with the doorbell on, the pub/sub it relies on. Meant
        for start-up and health checks: the builders connect lazily.

        Returns:
            Round-trip milliseconds per connection: ``{"quorum": 0.2, "non_quorum": 0.1,
            "doorbell": 0.2}`` (no ``"doorbell"`` without one).

        Raises:
            ConfigurationError: the server's ``maxmemory-policy`` may evict queue keys
                (``allkeys-*``) and ``eviction_check`` is ``"refuse"``.
            AccessDeniedError: a wrong password, unknown user or missing permission (at once).
            RedisOperationError: a connection failed after its retry budget; the operation
                names it (``ping quorum``, ...).
            QueueClosedError: the factory was closed.
        """
        return self._driver.run(self._ping())

    def stats(self, names: Sequence[str] | None = None, *,
              cost: ReadCost | None = None) -> list[QueueStats]:
        """What each queue holds right now, per shard: waiting (ready and delayed), leased,
        dead, the oldest ready message's age, delayed messages by time until due, and the
        queue's stored policy, schedules and pause flag. A read of every queue in a bounded
        number of round trips, whoever opened it (see :mod:`dynoqueue.core.stats` for the
        cost): the TIME and stored policies in one pipeline, the counts in another; nothing is
        written. A partitioned queue's (``QueuePolicy(partitions=n)``) counts are summed over
        its partitions, shard by shard, each partition's kept in ``partitions``. What the
        metrics' gauges, ``dynoqueue stats`` / ``top`` and the server's ``/api/queues`` and
        dashboard show. Mirrors Camellia's monitor (``waitingQueueInfo`` buckets included) and
        SQS ``GetQueueAttributes``' counts (``ApproximateNumberOfMessages`` = ready,
        ``...Delayed`` = delayed, ``...NotVisible`` = leased); dyno-queues' ``shardSizes``
        per queue.

        Args:
            names: the queues to read, in the order wanted; None: every queue under the key
                prefix, found with a SCAN (on a Cluster, of every primary), in the queue
                registry, or opened by this factory.
            cost: a :class:`~dynoqueue.model.stats.ReadCost` to fill with the round trips,
                commands and seconds (s) this read cost (what the metrics export per scrape).

        Returns:
            One :class:`~dynoqueue.model.stats.QueueStats` per queue, in the order of
            ``names`` (sorted by name when listed); a name with nothing in Redis reads as
            zeros. ``[]`` for no names (and no request).

        Raises:
            InvalidArgumentError: ``names`` is a string instead of a sequence of names.
            ConfigurationError: a name a queue cannot have (before any request).
            AccessDeniedError: a wrong password, unknown user or missing ACL permission
                (SCAN when listing, the reads).
            CallTimeoutError: the read outlasted ``call_timeout_ms``.
            RedisOperationError: Redis failed or cannot be reached (operation ``stats``).
        """
        cost = ReadCost() if cost is None else cost
        started = time.perf_counter()
        if names is None:
            names = run(stats_read.listing(self, cost))
        return self._driver.run(stats_read.measure(self, names, cost, started))

    def close(self) -> None:
        """Stop and join the unack reprocessor, close every queue, then the connections a
        builder made (connections passed to the constructor are the caller's and stay open).
        Idempotent. Mirrors ``close``.

        Bounded even when the server is frozen: it waits for the reprocessor and the doorbell
        listeners at most ``call_timeout_ms`` in all (plus a second), then leaves those
        daemon threads to end at their sockets' timeouts.
        """
        self._stop.set()
        ends_at = time.monotonic() + self.settings.call_timeout_s + 1.0
        if self._reprocessor is not None:
            self._reprocessor.join(timeout=max(0.0, ends_at - time.monotonic()))
            if self._reprocessor.is_alive():
                log.warning("the unack reprocessor did not stop in time (server frozen?); "
                            "closing without it")
        queues = self.queues()
        owned = self._detach()
        for queue in queues:
            for core in queue._bell_cores():
                self._driver.close_doorbell(core, max(0.1, ends_at - time.monotonic()))
        self._driver.release()
        for client in owned:
            client.close()

    def __enter__(self) -> RedisQueues:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def discover_queues(self) -> list[str]:
        """Find every queue under the key prefix with a SCAN and add it to the queue registry,
        so that every factory's unack pass covers it from then on. A one-off call for queues
        that no dynoqueue process pushed to (Java v1 clients do not write the registry); the
        passes themselves never scan. Mirrors no dyno-queues call (its reprocessor covers
        only the queues a process opened).

        Returns:
            The names found (and the queues this factory opened), sorted.

        Raises:
            AccessDeniedError: the ACL user may not SCAN.
            RedisOperationError: Redis failed.
        """
        step = Step(queue_names(self, "discover_queues"))
        while step.pending:
            step.send(*outcome(step.request))
        return self._driver.run(self._register_found(step.result))

    def _reprocess_loop(self) -> None:
        tick_s = self.reprocess_tick_ms() / 1000
        while not self._stop.wait(tick_s):
            try:
                self._driver.run(self._reprocess_tick())
            except Exception:  # the thread must survive anything (dyno-queues #85)
                log.exception("unack pass failed")
