"""DynoqueueBroker: a Dramatiq broker whose queues are dynoqueue queues.

Each dramatiq queue is the dynoqueue queue of the same name (so ``dynoqueue stats``, ``peek``,
``dead`` and the dashboard show it). ``enqueue(delay=...)`` stores the delay as the dynoqueue
message's due time: there are no delay queues (``.DQ``), and a worker never holds a delayed
message in memory. A consumed message is a lease, extended by the consumer while the worker
holds it (and by a heartbeat thread when the consumer does not run); ``ack`` acks it, ``nack``
dead-letters it, a worker shutting down gives prefetched messages back (``release``). See
``docs/dramatiq.md``.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from typing import Any

import dramatiq
from dramatiq.common import q_name
from dramatiq.errors import QueueJoinTimeout, QueueNotFound
from dramatiq.middleware import Middleware

from ..errors import ConfigurationError, InvalidArgumentError
from ..model.partitions import MAX_PARTITIONS
from ..model.policy import QueuePolicy
from ..model.validate import MAX_EPOCH_MS, MAX_MS, is_int
from ..queue import DynoQueue
from ..queues import RedisQueues
from .codec import to_dynoqueue
from .consumer import Consumer, Heartbeat, Leases, redis_call

#: The lease a consumed message takes and each heartbeat renews, unless told otherwise (ms).
DEFAULT_LEASE_MS = 30_000
#: The shortest lease accepted (ms): heartbeats come every third of it.
MIN_LEASE_MS = 300
#: Settings the broker sets itself: passing them through ``**options`` is an error.
OWN_SETTINGS = {"unack_timeout_ms": "lease_ms", "policy": "policy (or partitions)",
                "shard_supplier": "zones and local_zone"}


class DynoqueueBroker(dramatiq.Broker):
    """A Dramatiq broker on dynoqueue queues: sharded over zones, delays stored in Redis,
    leases with heartbeats, dead letters, Redis Cluster with partitioned queues, Sentinel.

    Switching an app is one line: ``broker = DynoqueueBroker("redis://localhost:6379")``
    instead of ``RedisBroker(...)``, then ``dramatiq.set_broker(broker)`` as before. Mirrors
    dramatiq's ``RedisBroker`` (enqueue, consume, ack/nack/requeue, flush, flush_all, join).

    Args:
        url: the deployment, anything :meth:`dynoqueue.RedisQueues.from_url` takes:
            ``redis://``, ``rediss://``, ``unix://``, ``redis+sentinel://``,
            ``redis+cluster://``.
        zones: every availability zone (a zone's shard is its last character); None: one
            shard. Messages are spread round-robin over the zones' shards.
        local_zone: this process's zone (required with ``zones``): its consumers pop from its
            shard, and adopt the shards of zones without a live process for
            ``orphan_shard_grace_ms`` (an option below).
        key_prefix: prefix of every Redis key (the ops CLI's ``--prefix``).
        partitions: each queue's partitions, 1..1024: n > 1 spreads a queue over n Redis
            Cluster hash slots (``QueuePolicy(partitions=n)``). Fixed for a queue's life.
        policy: each queue's full :class:`~dynoqueue.QueuePolicy` instead (its partitions must
            agree with ``partitions`` when both are given). Its ``max_deliveries`` bounds
            redeliveries after lost leases (crashed workers); dramatiq's Retries middleware
            counts failures as before.
        lease_ms: how long a consumed message is leased, ms, >= 300 (default 30 000). The
            consumer renews the leases its worker holds every third of it; a message whose
            worker died is delivered again once its lease ran out and the unack reprocessor
            ran (every ``unack_handler_interval_ms``).
        middleware: dramatiq middleware, as for every broker (None: dramatiq's defaults).
        factory: an existing sync :class:`~dynoqueue.RedisQueues` to use instead of building
            one from ``url`` (then ``zones``, ``local_zone``, ``key_prefix`` and ``options``
            must not be given, its own policy applies unless ``policy`` or ``partitions``
            is, and :meth:`close` leaves it open).
        **options: passed to :meth:`RedisQueues.from_url`: ``replica_urls``,
            ``client_options``, ``read_from_replicas``, ``retry``, and settings such as
            ``unack_handler_interval_ms`` (default here: half the lease, 1 000 .. 60 000),
            ``orphan_shard_grace_ms``, ``write_quorum``, ``max_payload_bytes``,
            ``call_timeout_ms``, ``poll_interval_ms``.

    Raises:
        ConfigurationError: (a ValueError) a bad option, URL or setting; raised before
            anything is written to Redis.
        RedisOperationError: (cluster URLs) no node could be reached.
    """

    def __init__(self, url: str = "redis://localhost:6379", *,
                 zones: Sequence[str] | None = None, local_zone: str | None = None,
                 key_prefix: str = "dynoqueue", partitions: int = 1,
                 policy: QueuePolicy | None = None, lease_ms: int = DEFAULT_LEASE_MS,
                 middleware: list[Middleware] | None = None,
                 factory: RedisQueues | None = None, **options: Any) -> None:
        self.lease_ms = _lease_ms(lease_ms)
        checked = _policy(partitions, policy)
        # A given factory's own policy applies unless one was asked for here.
        self.policy: QueuePolicy | None = (
            None if factory is not None and policy is None and partitions == 1 else checked)
        for name, instead in OWN_SETTINGS.items():
            if name in options:
                raise ConfigurationError(f"DynoqueueBroker sets {name} itself: use {instead}")
        if factory is not None:
            if not isinstance(factory, RedisQueues):
                raise ConfigurationError(
                    f"factory must be a dynoqueue.RedisQueues, got {type(factory).__name__}")
            if zones is not None or local_zone is not None or options \
                    or key_prefix != "dynoqueue":
                raise ConfigurationError("give either factory or the connection options "
                                         "(zones, local_zone, key_prefix, ...), not both")
            self.factory, self._owns_factory = factory, False
        else:
            options.setdefault("unack_handler_interval_ms",
                               min(60_000, max(1_000, self.lease_ms // 2)))
            self.factory = RedisQueues.from_url(url, zones=zones, local_zone=local_zone,
                                                key_prefix=key_prefix,
                                                unack_timeout_ms=self.lease_ms, **options)
            self._owns_factory = True
        super().__init__(middleware=middleware)
        self.queues: dict[str, DynoQueue] = {}
        self._leases: dict[str, Leases] = {}
        self._lock = threading.Lock()
        self._heartbeat: Heartbeat | None = None

    def _queue(self, queue_name: str) -> DynoQueue:
        """The dynoqueue queue of a dramatiq queue, declared or not (checks the name)."""
        queue = self.queues.get(queue_name)
        return queue if queue is not None else self.factory.get(queue_name, self.policy)

    def declare_queue(self, queue_name: str) -> None:
        """Declare a queue (idempotent): its dynoqueue queue of the same name. Declares no
        delay queue: delays are due times (``get_declared_delay_queues()`` stays empty).

        Raises:
            ConfigurationError: the name is not a valid dynoqueue queue name (braces,
                whitespace, a key word between dots such as ``x.QUEUE.y``), or the queue's
                stored policy differs.
        """
        if queue_name in self.queues:
            return
        queue = self._queue(queue_name)
        self.emit_before("declare_queue", queue_name)
        self.queues[queue_name] = queue
        self._leases[queue_name] = Leases(queue, self.lease_ms)
        self.emit_after("declare_queue", queue_name)

    def enqueue(self, message: dramatiq.Message[Any], *,
                delay: int | None = None) -> dramatiq.Message[Any]:
        """Push a message; with ``delay`` it is due that many ms from now (the Redis server's
        clock), stored in Redis, not in a delay queue. The dynoqueue id is the dramatiq
        ``message_id``: enqueueing an id that is waiting or leased replaces it (a retry of a
        message being processed replaces its lease, whose ack then does nothing). The
        actor's priority, clamped to 0..99, is the dynoqueue priority. A message carrying an
        ``eta`` option and no delay (moved from a RedisBroker delay queue) is due at its eta.

        Args:
            message: the dramatiq message (or a proxy of one, as the Retries middleware
                passes).
            delay: ms, >= 0, or None (due now).

        Returns:
            The message as stored: canonical queue name, no ``eta`` option.

        Raises:
            InvalidArgumentError: (a ValueError) a bad delay.
            InvalidMessageError: (a ValueError) the encoded message is over
                ``max_payload_bytes`` (default 1 MiB), or its id is not a valid id.
            ConfigurationError: an invalid queue name.
            dramatiq.errors.ConnectionClosed: Redis failed.
        """
        timeout_ms = _delay_ms(delay)
        options = dict(message.options)
        eta = options.pop("eta", None)
        due_at_ms = _eta_ms(eta) if delay is None else None
        fields = message.asdict()
        fields.update(queue_name=q_name(message.queue_name), options=options)
        message = dramatiq.Message(**fields)
        actor = self.actors.get(message.actor_name)
        stored = to_dynoqueue(message, timeout_ms=timeout_ms, due_at_ms=due_at_ms,
                              priority=actor.priority if actor is not None else 0)
        stored.validate(self.factory.settings.max_payload_bytes)  # before any signal
        queue = self._queue(message.queue_name)
        self.emit_before("enqueue", message, delay)
        redis_call("enqueue", lambda: queue.push([stored]))
        self.emit_after("enqueue", message, delay)
        return message

    def consume(self, queue_name: str, prefetch: int = 1, timeout: int = 30000) -> Consumer:
        """A consumer of a declared queue, for dramatiq's worker.

        Args:
            queue_name: the queue.
            prefetch: most messages it keeps leased and not yet done.
            timeout: ms a ``next()`` waits for a message before yielding None (capped at a
                third of the lease, so heartbeats keep their pace).

        Raises:
            dramatiq.errors.QueueNotFound: the queue was not declared.
        """
        leases = self._leases.get(queue_name)
        if leases is None:
            raise QueueNotFound(queue_name)  # type: ignore[no-untyped-call]
        with self._lock:
            if self._heartbeat is None:
                self._heartbeat = Heartbeat(lambda: list(self._leases.values()),
                                            leases.beat_every_s / 2)
                self._heartbeat.start()
        return Consumer(leases, prefetch, timeout)

    def get_declared_queues(self) -> set[str]:
        """The names of the queues declared so far."""
        return set(self.queues)

    def flush(self, queue_name: str) -> None:
        """Delete every message of a queue, waiting (delayed included) or leased, in every
        shard and partition. Dead letters stay (see :meth:`flush_all`).

        Raises:
            dramatiq.errors.ConnectionClosed: Redis failed.
        """
        queue = self._queue(queue_name)
        redis_call("flush", queue.clear)

    def flush_all(self) -> None:
        """:meth:`flush` every declared queue and delete its dead letters.

        Raises:
            dramatiq.errors.ConnectionClosed: Redis failed.
        """
        for queue in list(self.queues.values()):
            redis_call("flush", queue.clear)
            redis_call("flush", queue.purge_dead)

    def join(self, queue_name: str, *, interval: int = 100, timeout: int | None = None) -> None:
        """Wait until a queue holds no message, waiting (delayed ones included) or leased: every
        message sent so far has been processed (acked or dead-lettered). Meant for tests.
        Reads go to the non-quorum connection (a replica when configured).

        Args:
            queue_name: the queue.
            interval: ms between checks, >= 1.
            timeout: the longest wait, ms; None: no limit.

        Raises:
            dramatiq.errors.QueueJoinTimeout: the timeout passed first.
            dramatiq.errors.ConnectionClosed: Redis failed.
        """
        queue = self._queue(queue_name)
        deadline = None if timeout is None else time.monotonic() + timeout / 1000
        while True:
            sizes = redis_call("join", queue.shard_sizes)
            if not any(s["size"] or s["uacked"] for s in sizes.values()):
                return
            if deadline is not None and time.monotonic() >= deadline:
                raise QueueJoinTimeout(queue_name)  # type: ignore[no-untyped-call]
            time.sleep(max(1, interval) / 1000)

    def close(self) -> None:
        """Stop the lease heartbeat thread and close the dynoqueue factory this broker built
        (its reprocessor and connections). Idempotent."""
        with self._lock:
            heartbeat, self._heartbeat = self._heartbeat, None
        if heartbeat is not None:
            heartbeat.stop(timeout_s=self.factory.settings.call_timeout_s + 1)
        if self._owns_factory:
            self.factory.close()


def _lease_ms(lease_ms: Any) -> int:
    if not is_int(lease_ms) or not MIN_LEASE_MS <= lease_ms <= MAX_MS:
        raise ConfigurationError(
            f"lease_ms must be an int >= {MIN_LEASE_MS} and <= {MAX_MS} (ms), got {lease_ms!r:.80}")
    return int(lease_ms)


def _policy(partitions: Any, policy: Any) -> QueuePolicy:
    if not is_int(partitions) or not 1 <= partitions <= MAX_PARTITIONS:
        raise ConfigurationError(
            f"partitions must be an int in 1..{MAX_PARTITIONS}, got {partitions!r:.80}")
    if policy is None:
        return QueuePolicy(partitions=partitions)
    if not isinstance(policy, QueuePolicy):
        raise ConfigurationError(f"policy must be a dynoqueue.QueuePolicy, got {policy!r:.80}")
    if partitions != 1 and policy.partitions != partitions:
        raise ConfigurationError(f"partitions={partitions} disagrees with the policy's "
                                 f"partitions={policy.partitions}")
    return policy


def _eta_ms(eta: Any) -> int | None:
    """An ``eta`` option (epoch ms) as a due time, or None when it is not a finite number."""
    if isinstance(eta, bool) or not isinstance(eta, int | float) or not math.isfinite(eta):
        return None
    return min(MAX_EPOCH_MS, max(0, math.ceil(eta)))


def _delay_ms(delay: Any) -> int:
    """A delay in whole ms (rounded up, so never early); 0 for None."""
    if delay is None:
        return 0
    if isinstance(delay, bool) or not isinstance(delay, int | float) or not math.isfinite(delay) \
            or not 0 <= delay <= MAX_MS:
        raise InvalidArgumentError(f"delay must be a number of ms in 0..{MAX_MS}, "
                                   f"got {delay!r:.80}")
    return math.ceil(delay)
