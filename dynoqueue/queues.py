"""RedisQueues: the factory that hands out one DynoQueue per name and runs the unack reprocessor.

Mirrors dyno-queues' ``RedisQueues``: it holds the quorum connection (writes and claims), the
non-quorum connection (cheap local reads), the shard supplier and the sharding strategy, and one
daemon thread that periodically puts back messages whose lease expired, for every queue it
created, on the local shard.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any

from .errors import ConfigurationError, QueueClosedError
from .keys import check_name
from .message import DEFAULT_MAX_PAYLOAD_BYTES
from .queue import DynoQueue
from .sharding import RoundRobinStrategy, ShardingStrategy, ShardSupplier

log = logging.getLogger("dynoqueue.queues")


class RedisQueues:
    """Factory of named queues sharing connections, shards and settings.

    Mirrors ``com.netflix.dyno.queues.redis.RedisQueues``. A context manager: leaving the
    ``with`` block calls :meth:`close`.

    Args:
        quorum_conn: redis-py client for writes and claims (``redis.Redis`` on the primary, or
            ``redis.cluster.RedisCluster``), with or without ``decode_responses``.
        non_quorum_conn: redis-py client for cheap reads (usually the local zone's replica);
            may be the same object as ``quorum_conn``.
        key_prefix: prefix of every key (dyno-queues' ``redisKeyPrefix``); no braces/whitespace.
        shard_supplier: names all shards and the local one (see :mod:`dynoqueue.sharding`).
        unack_timeout_ms: lease a pop takes on each message, ms, >= 1 (default 60 s).
        unack_handler_interval_ms: how often the unack reprocessor runs, ms, >= 1; 0 disables
            the thread (call ``process_unacks`` yourself). Default 60 s.
        sharding_strategy: where pushes go; default :class:`RoundRobinStrategy`.
        write_quorum: after each write (push, ensure, ack, remove, set_timeout,
            set_unack_timeout), ``WAIT`` for this many replicas, >= 0; fewer acknowledgements
            raise :class:`~dynoqueue.errors.QuorumNotReachedError`. Claims and unack
            re-queues do not wait: losing one in a failover only causes a redelivery. WAIT
            does not make Redis strongly consistent; pair it with the server's
            ``min-replicas-to-write``.
        write_quorum_timeout_ms: how long WAIT may block, ms, >= 1.
        clock: callable returning epoch milliseconds, to replace the Redis server's clock (for
            tests, or servers without TIME in scripts such as Dynomite).
        max_payload_bytes: largest payload accepted, UTF-8 bytes, >= 1 (default 1 MiB).
        poll_interval_ms: longest a waiting pop sleeps between checks when no doorbell rings
            (a producer that does not ring, such as the Java client), ms, >= 1 (default 1 s).
        hash_tag: wrap queue names in a Redis Cluster hash tag (``P.QUEUE.{Q}.S``); default:
            on when ``quorum_conn`` is a ``RedisCluster``.
        doorbell: scripts PUBLISH a pub/sub doorbell that wakes waiting pops (default True);
            False for servers without pub/sub (Dynomite): waiting pops then poll every
            ``poll_interval_ms`` (or at the next due time, if sooner).

    The builders :meth:`from_url`, :meth:`from_sentinel` and :meth:`from_cluster` make the
    connections from addresses (TLS and ACL users included) and close them on :meth:`close`.

    Raises:
        ConfigurationError: (a ValueError) an argument is out of range or inconsistent.
    """

    def __init__(
        self,
        quorum_conn: Any,
        non_quorum_conn: Any,
        *,
        key_prefix: str,
        shard_supplier: ShardSupplier,
        unack_timeout_ms: int = 60_000,
        unack_handler_interval_ms: int = 60_000,
        sharding_strategy: ShardingStrategy | None = None,
        write_quorum: int = 0,
        write_quorum_timeout_ms: int = 100,
        clock: Callable[[], int] | None = None,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        poll_interval_ms: int = 1000,
        hash_tag: bool | None = None,
        doorbell: bool = True,
    ) -> None:
        for conn_name, conn in (("quorum_conn", quorum_conn), ("non_quorum_conn", non_quorum_conn)):
            if not callable(getattr(conn, "register_script", None)):
                raise ConfigurationError(
                    f"{conn_name} must be a redis-py client (redis.Redis or RedisCluster), "
                    f"got {type(conn).__name__}"
                )
        self.key_prefix = check_name("key prefix", key_prefix)
        if not isinstance(shard_supplier, ShardSupplier):
            raise ConfigurationError("shard_supplier must provide get_queue_shards() and "
                                     "get_current_shard()")
        self.shards = list(shard_supplier.get_queue_shards())
        self.local_shard = shard_supplier.get_current_shard()
        if not self.shards or self.local_shard not in self.shards:
            raise ConfigurationError(
                f"current shard {self.local_shard!r} is not one of the shards {self.shards}"
            )
        _positive("unack_timeout_ms", unack_timeout_ms)
        _positive("unack_handler_interval_ms", unack_handler_interval_ms, allow_zero=True)
        _positive("write_quorum", write_quorum, allow_zero=True)
        _positive("write_quorum_timeout_ms", write_quorum_timeout_ms)
        _positive("max_payload_bytes", max_payload_bytes)
        _positive("poll_interval_ms", poll_interval_ms)
        if clock is not None and not callable(clock):
            raise ConfigurationError("clock must be a callable returning epoch milliseconds")
        if sharding_strategy is None:
            sharding_strategy = RoundRobinStrategy()
        elif not callable(getattr(sharding_strategy, "get_next_shard", None)):
            raise ConfigurationError("sharding_strategy must provide get_next_shard()")
        if hash_tag is None:
            from redis.cluster import RedisCluster

            hash_tag = isinstance(quorum_conn, RedisCluster)

        self.quorum_conn = quorum_conn
        self.non_quorum_conn = non_quorum_conn
        self.unack_timeout_ms = unack_timeout_ms
        self.unack_handler_interval_ms = unack_handler_interval_ms
        self._settings: dict[str, Any] = dict(
            quorum_conn=quorum_conn,
            non_quorum_conn=non_quorum_conn,
            key_prefix=key_prefix,
            shards=self.shards,
            local_shard=self.local_shard,
            sharding_strategy=sharding_strategy,
            unack_timeout_ms=unack_timeout_ms,
            write_quorum=write_quorum,
            write_quorum_timeout_ms=write_quorum_timeout_ms,
            clock=clock,
            max_payload_bytes=max_payload_bytes,
            poll_interval_ms=poll_interval_ms,
            hash_tag=hash_tag,
            doorbell=bool(doorbell),
        )
        self._owned: list[Any] = []
        self._queues: dict[str, DynoQueue] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._reprocessor: threading.Thread | None = None
        if unack_handler_interval_ms > 0:
            self._reprocessor = threading.Thread(
                target=self._reprocess_loop, name="dynoqueue-unack-reprocessor", daemon=True
            )
            self._reprocessor.start()

    def get(self, queue_name: str) -> DynoQueue:
        """The queue named ``queue_name``, created on first use; the same object every time
        (until that queue is closed on its own: then a new one replaces it).

        Mirrors ``get``.

        Raises:
            ConfigurationError: the name is empty or has braces, whitespace or control chars.
            QueueClosedError: this factory was closed.
        """
        check_name("queue name", queue_name)
        with self._lock:
            if self._stop.is_set():
                raise QueueClosedError("RedisQueues is closed")
            queue = self._queues.get(queue_name)
            if queue is None or queue.closed:
                queue = DynoQueue(queue_name, **self._settings)
                self._queues[queue_name] = queue
            return queue

    def queues(self) -> list[DynoQueue]:
        """Every queue this factory has created so far. Mirrors ``queues``."""
        with self._lock:
            return list(self._queues.values())

    def close(self) -> None:
        """Stop and join the unack reprocessor, then close every queue. Idempotent.

        Connections passed to the constructor are the caller's and stay open; those a builder
        (:meth:`from_url`, ...) made are closed. Mirrors ``close``.
        """
        self._stop.set()
        if self._reprocessor is not None:
            self._reprocessor.join()
        for queue in self.queues():
            queue.close()
        owned, self._owned = self._owned, []
        for client in owned:
            client.close()

    def own_connections(self, clients: list[Any]) -> None:
        """Take ownership of ``clients``: :meth:`close` will close them (used by builders)."""
        self._owned.extend(clients)

    # The builders live in dynoqueue.connect; these are their documented entry points.

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisQueues:
        """Build from a deployment URL: ``redis://``, ``rediss://``, ``unix://``,
        ``redis+sentinel://``, ``redis+cluster://`` (TLS: ``rediss...``). See
        :func:`dynoqueue.connect.from_url` for the arguments (``zones``, ``local_zone``,
        ``replica_urls``, ``key_prefix``, ``retry``, ``dynomite``, ...).

        Raises:
            ConfigurationError: a bad URL or setting.
        """
        from .connect import from_url

        return from_url(url, **kwargs)

    @classmethod
    def from_sentinel(
        cls, sentinels: Any, service_name: str, **kwargs: Any
    ) -> RedisQueues:
        """Build on a Sentinel-managed primary that is followed through failovers. See
        :func:`dynoqueue.connect.from_sentinel`.

        Raises:
            ConfigurationError: a bad sentinel list or setting.
        """
        from .connect import from_sentinel

        return from_sentinel(sentinels, service_name, **kwargs)

    @classmethod
    def from_cluster(cls, nodes: Any, **kwargs: Any) -> RedisQueues:
        """Build on a Redis Cluster, one hash slot per queue, reads on replicas. See
        :func:`dynoqueue.connect.from_cluster`.

        Raises:
            ConfigurationError: a bad address or setting.
        """
        from .connect import from_cluster

        return from_cluster(nodes, **kwargs)

    def __enter__(self) -> RedisQueues:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def process_unacks(self) -> int:
        """Run one unack pass over every queue now (what the reprocessor thread does).

        Errors of one queue are logged and do not stop the others.

        Returns:
            How many messages were put back in all.
        """
        total = 0
        for queue in self.queues():
            if self._stop.is_set():
                break
            if queue.closed:
                continue
            try:
                total += queue.process_unacks()
            except Exception:  # the reprocessor must survive anything (dyno-queues #85)
                log.exception("unack processing failed for queue %s", queue.name)
        return total

    def _reprocess_loop(self) -> None:
        interval_s = self.unack_handler_interval_ms / 1000
        while not self._stop.wait(interval_s):
            self.process_unacks()


def _positive(name: str, value: object, *, allow_zero: bool = False) -> None:
    low = 0 if allow_zero else 1
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ConfigurationError(f"{name} must be an int >= {low}, got {value!r}")
