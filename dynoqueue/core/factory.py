"""What both RedisQueues classes share: settings, the queue registry, the unack pass, closing.

The sync :class:`dynoqueue.RedisQueues` and :class:`dynoqueue.asyncio.RedisQueues` subclass
:class:`QueuesBase` and add only their driver, their reprocessor (a thread or a task) and the
sync or async spelling of close (the two DynoQueue classes' base: core/facade.py).
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar, Unpack

from ..errors import ConfigurationError, QueueClosedError
from ..model.keys import QueueKeys, check_name, check_queue_name, scheduled_queues
from ..model.message import as_text
from ..model.policy import QueuePolicy
from ..model.settings import QueueOptions, QueueSettings
from ..model.sharding import ShardSupplier
from .facade import QueueBase
from .failures import guarded
from .layout import AnyCore, Discovering, open_core
from .partitioned import PartitionedCore
from .preflight import EVICTED, ServerCheck
from .queue import QueueCore
from .requests import QUORUM, READ, Budget, Command, Op
from .shared import no_events
from .zones import ZoneWatch

log = logging.getLogger("dynoqueue.queues")

Q = TypeVar("Q", bound=QueueBase)


class QueuesBase(Generic[Q]):
    """Settings, connections and the registry of one factory (see the RedisQueues classes).

    Args:
        quorum_conn, non_quorum_conn: the clients (see the subclasses for the kinds accepted).
        key_prefix, shard_supplier, **options: see :class:`~dynoqueue.model.settings.QueueOptions`.

    Raises:
        ConfigurationError: (a ValueError) a client of the wrong kind, or a bad setting.
    """

    #: The façade class of one queue, set by each API (called with the core and the driver).
    queue_class: Callable[[AnyCore, Any], Q]
    _driver: Any
    #: True for the asyncio API: its clients' execute_command is a coroutine function.
    asynchronous: bool = False
    #: The Redis Cluster client class of this API (RedisCluster or its asyncio twin).
    cluster_class: type
    #: The driver class of this API, made with (quorum client, read client, call deadline s).
    driver_class: Callable[[Any, Any, float], Any]

    def __init__(self, quorum_conn: Any, non_quorum_conn: Any, *, key_prefix: str,
                 shard_supplier: ShardSupplier, **options: Unpack[QueueOptions]) -> None:
        for role, conn in (("quorum_conn", quorum_conn), ("non_quorum_conn", non_quorum_conn)):
            execute = getattr(conn, "execute_command", None)
            if not callable(execute) or not callable(getattr(conn, "pipeline", None)):
                raise ConfigurationError(f"{role} must be a redis-py client (Redis or "
                                         f"RedisCluster), got {type(conn).__name__}")
            if inspect.iscoroutinefunction(execute) != self.asynchronous:
                want = "redis.asyncio" if self.asynchronous else "a sync redis"
                raise ConfigurationError(f"{role} must be {want} client for "
                                         f"{type(self).__module__}.{type(self).__name__}")
        check_name("key prefix", key_prefix)
        self.settings = QueueSettings.build(
            key_prefix, shard_supplier, cluster=isinstance(quorum_conn, self.cluster_class),
            **options)
        self.key_prefix = key_prefix
        self.shards = list(self.settings.shards)
        self.local_shard = self.settings.local_shard
        self.unack_timeout_ms = self.settings.unack_timeout_ms
        self.unack_handler_interval_ms = self.settings.unack_handler_interval_ms
        self.quorum_conn = quorum_conn
        self.non_quorum_conn = non_quorum_conn
        balancing = getattr(non_quorum_conn, "load_balancing_strategy", None)
        self._replica_reads = isinstance(non_quorum_conn, self.cluster_class) and bool(balancing)
        self._driver = self._new_driver(quorum_conn, non_quorum_conn)
        self._owned: list[Any] = []
        self._queues: dict[str, Q] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._events: Callable[[str, str, int], None] = no_events
        #: The queue registry and zone heartbeat (see :mod:`dynoqueue.core.zones`).
        self.zones = ZoneWatch(self.settings)
        #: Cores of queues found in the registry that this factory has not opened: the unack
        #: pass handles them too (with the policy stored in Redis, not this factory's).
        self._discovered: dict[str, AnyCore] = {}
        self._next_pass = time.monotonic() + self.unack_handler_interval_ms / 1000
        self._server_check = ServerCheck(self.settings.eviction_check, self.settings.cluster)
        if self._server_check.done:
            log.debug("maxmemory-policy not checked: eviction_check is off")

    def _new_driver(self, quorum_conn: Any, non_quorum_conn: Any) -> Any:
        """The driver of this factory's calls (an API with driver settings of its own
        overrides this)."""
        return self.driver_class(quorum_conn, non_quorum_conn, self.settings.call_timeout_s)

    def get(self, queue_name: str, policy: QueuePolicy | None = None) -> Q:
        """The queue named ``queue_name``, created on first use; the same object every time
        (until that queue is closed on its own: then a new one replaces it). Mirrors ``get``.

        Args:
            queue_name: the queue's name.
            policy: this queue's :class:`QueuePolicy`, instead of the factory's ``policy``.
                Stored with the queue at its first call; a process whose policy differs from
                the stored one gets a ConfigurationError then.

        Raises:
            ConfigurationError: the name is empty or has braces, whitespace, control chars or
                a key word between dots (``QUEUE.x``: no two queues may share a key);
                a policy that is not a QueuePolicy, or not the one this queue was created with.
            QueueClosedError: this factory was closed.
        """
        check_queue_name(queue_name)
        if policy is not None and not isinstance(policy, QueuePolicy):
            raise ConfigurationError(f"policy must be a QueuePolicy, got {policy!r}")
        with self._lock:
            if self._closed:
                raise QueueClosedError("RedisQueues is closed")
            queue = self._queues.get(queue_name)
            if queue is not None and policy is not None and queue._core.policy != policy:
                raise ConfigurationError(f"queue {queue_name!r} was made with policy "
                                         f"{queue._core.policy}, not {policy}")
            if queue is None or queue.closed:
                core = open_core(queue_name, self.settings,
                                 quorum_cluster=self.settings.cluster,
                                 replica_reads=self._replica_reads, policy=policy)
                core.events = self._events
                core.zones = self.zones
                core.server_check = self._server_check
                queue = self.queue_class(core, self._driver)
                if isinstance(core, Discovering):
                    core.on_found = queue._found
                self._queues[queue_name] = queue
            return queue

    def keys_of(self, queue_name: str) -> QueueKeys:
        """The key names of queue ``queue_name`` under this factory's prefix and shards, in
        its one-partition layout (a partitioned queue keeps its policy there; its partitions'
        keys: :func:`dynoqueue.model.partitions.partition_keys`). No I/O, opens no queue.

        Raises:
            ConfigurationError: a name a queue cannot have.
        """
        settings = self.settings
        return QueueKeys(settings.key_prefix, queue_name, settings.shards,
                         bool(settings.hash_tag))

    def queues(self) -> list[Q]:
        """Every queue this factory has created so far. Mirrors ``queues``."""
        with self._lock:
            return list(self._queues.values())

    def set_events(self, events: Callable[[str, str, int], None]) -> None:
        """Have ``events(queue, kind, count)`` called after every successful operation of this
        factory's queues, those made so far and later (how :mod:`dynoqueue.metrics` counts).

        Args:
            events: a quick, thread-safe callable (no I/O); kind is pushed, delivered, acked,
                nacked, redelivered, dead_lettered, expired or payload_missing (ids found
                without payload, also counted as dead_lettered), count >= 0 messages.
        """
        with self._lock:
            self._events = events
            for queue in self._queues.values():
                queue._core.events = events
            for core in list(self._discovered.values()):
                core.events = events

    def own_connections(self, clients: Sequence[Any]) -> None:
        """Take ownership of ``clients``: closing the factory closes them (used by builders)."""
        self._owned.extend(clients)

    def _detach(self) -> list[Any]:
        """Mark the factory and every queue closed; return the clients to close."""
        self._closed = True
        for queue in self.queues():
            queue._core.closed = queue._core.detached = True
        for core in list(self._discovered.values()):
            core.closed = core.detached = True
        owned, self._owned = self._owned, []
        return owned

    def _ping(self) -> Op[dict[str, float]]:
        """Check every connection the queues use; reply: round-trip ms per connection."""
        if self._closed:
            raise QueueClosedError("RedisQueues is closed")
        checks: list[tuple[str, str, tuple[str, ...]]] = [
            ("quorum", QUORUM, ("PING",)), ("non_quorum", READ, ("PING",))]
        if self.settings.doorbell:  # waiting pops subscribe through the quorum connection
            checks.append(("doorbell", QUORUM, ("PUBSUB", "NUMSUB", "dynoqueue-ping")))
        out: dict[str, float] = {}
        for name, role, args in checks:
            started = time.perf_counter()
            yield from guarded(f"ping {name}", "", self._command(role, args))
            out[name] = (time.perf_counter() - started) * 1000
        yield from guarded("ping quorum", "", self._server_check.run(""))
        return out

    @staticmethod
    def _command(role: str, args: tuple[str, ...]) -> Op[object]:
        return (yield Command(role, args))

    def _unack_pass(self) -> Op[int]:
        """One unack pass: the zone heartbeat, then every open queue of this factory and every
        queue in the registry (each on the local shard and the adopted ones); one queue's
        error is logged, not raised."""
        yield from self._beat()
        yield from self._watch_evictions()
        cores: list[Any] = [queue._core for queue in self.queues() if not queue.closed]
        opened = {core.name for core in cores}
        names: list[str] = []
        try:
            names = yield from self.zones.known()
            # Checked every pass, not once: a clear() elsewhere takes a queue out of it.
            missing = opened.difference(names)
            if missing:
                yield from self.zones.register(missing, again=True)
        except Exception:  # the reprocessor must survive anything (dyno-queues #85)
            log.exception("reading the queue registry %s failed", self.zones.keys.queues)
        for name in names:
            if name not in opened and (core := self._discovered_core(name)) is not None:
                cores.append(core)
        total = 0
        for core in cores:
            if self._closed:
                break
            try:
                yield Budget(0)  # each queue's pass has a deadline of its own
                total += yield from core.process_unacks()
            except Exception:  # the reprocessor must survive anything (dyno-queues #85)
                log.exception("unack processing failed for queue %s", core.name)
        return total

    def _watch_evictions(self) -> Op[None]:
        """Where an evicting maxmemory-policy was allowed (eviction_check="warn"): log and
        count the keys the server evicted since the last pass (see ServerCheck); a failure to
        read is logged."""
        if self._server_check.evicting is None:
            return
        deployment = self._deployment()
        try:
            evicted = yield from self._server_check.watch_evictions(deployment)
        except Exception:  # the reprocessor must survive anything
            log.exception("reading evicted_keys of Redis at %s failed", deployment)
            return
        if evicted:
            self._events(deployment, EVICTED, evicted)

    def _deployment(self) -> str:
        """The deployment this factory writes to, as logs name it: the quorum connection's
        ``host:port`` (a Cluster: its startup nodes; a Unix socket: its path) and the key
        prefix. No credentials."""
        conn = self.quorum_conn
        nodes = getattr(getattr(conn, "nodes_manager", None), "startup_nodes", None)
        if nodes:
            where = "cluster " + ",".join(sorted(str(name) for name in nodes))
        else:
            pool = getattr(conn, "connection_pool", None)
            found = getattr(pool, "connection_kwargs", {})
            service = getattr(pool, "service_name", None)
            where = (f"sentinel service {service}" if service
                     else str(found["path"]) if found.get("path")
                     else f"{found.get('host', '?')}:{found.get('port', '?')}")
        return f"{where} (key prefix {self.key_prefix})"

    def _beat(self) -> Op[None]:
        """Write the zone heartbeat and refresh the adopted shards; a failure is logged (the
        adopted shards stay as they were)."""
        try:
            yield from self.zones.beat()
        except Exception:
            log.exception("zone heartbeat %s failed", self.zones.keys.zones)

    def _discovered_core(self, name: str) -> AnyCore | None:
        """The core of a registry queue this factory has not opened (None: a name that is no
        queue name, written by something else)."""
        core = self._discovered.get(name)
        if core is None:
            try:
                plain = QueueCore(name, self.settings, quorum_cluster=self.settings.cluster,
                                  replica_reads=self._replica_reads)
            except ConfigurationError:
                return None
            # Apply what the queue has stored, never this factory's policy: not opened here.
            plain.policy, plain.policy_checked = None, True
            core = Discovering(plain, lambda stored: PartitionedCore(
                name, self.settings, quorum_cluster=self.settings.cluster,
                replica_reads=self._replica_reads, policy=stored, stored=True))
            core.on_found = lambda found: self._discovered.__setitem__(name, found)
            core.zones = self.zones
            with self._lock:
                core.events = self._events
                self._discovered[name] = core
        return core

    def reprocess_tick_ms(self) -> int:
        """How often the reprocessor wakes: every unack interval, and at least three times per
        grace period so that a live zone never looks orphaned (0: no reprocessor)."""
        interval = self.unack_handler_interval_ms
        grace = self.settings.orphan_shard_grace_ms
        if interval <= 0 or grace <= 0:
            return interval
        return max(1, min(interval, grace // 3))

    def _reprocess_tick(self) -> Op[int]:
        """What the reprocessor does when it wakes: the unack pass when it is due, else only
        the zone heartbeat. Returns how many messages were put back."""
        now = time.monotonic()
        if now < self._next_pass:
            yield from self._beat()
            return 0
        self._next_pass = now + self.unack_handler_interval_ms / 1000
        put_back = yield from self._unack_pass()
        yield from self._schedules_pass()
        return put_back

    def _schedules_pass(self) -> Op[int]:
        """One schedule pass: every queue in the registry of scheduled queues
        (``P.SCHEDULED.QUEUES``) queues its ticks ahead; one queue's error is logged, not
        raised. Returns how many ticks were queued."""
        registry = scheduled_queues(self.settings.key_prefix)
        try:
            raw = yield Command(QUORUM, ("SMEMBERS", registry))
        except Exception:  # the reprocessor must survive anything
            log.exception("reading the schedule registry %s failed", registry)
            return 0
        opened = {queue._core.name: queue._core for queue in self.queues() if not queue.closed}
        total = 0
        for name in sorted(as_text(n) for n in raw):
            if self._closed:
                break
            core = opened.get(name) or self._discovered_core(name)
            if core is None:
                continue
            try:
                yield Budget(0)  # each queue's pass has a deadline of its own
                total += yield from core.run_schedules()
            except Exception:  # the reprocessor must survive anything
                log.exception("the schedule pass failed for queue %s", name)
        return total

    def _register_found(self, names: Sequence[str]) -> Op[list[str]]:
        """Add ``names`` (found by a SCAN) to the registry; return them."""
        yield from self.zones.register(names, again=True)
        return list(names)
