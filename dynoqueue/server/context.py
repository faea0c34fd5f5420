"""What one ``dynoqueue serve`` process holds: its settings, the asyncio factory, the queue of
each topic, the metrics, Camellia's monitor counts and Youzan's id -> topic index."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from prometheus_client import CollectorRegistry

from ..asyncio import RedisQueues
from ..asyncio.queue import DynoQueue
from ..errors import ConfigurationError, DynoQueueError
from ..metrics import QueueMetrics
from ..metrics.stats import list_queues_async
from ..model.keys import check_queue_name, youzan_index
from ..model.policy import QueuePolicy
from ..model.validate import MAX_COUNT, MAX_MS, int_at_least
from .http import BadRequest
from .longpoll import LongPolls

log = logging.getLogger("dynoqueue.server")

#: ServerSettings.max_body_bytes' default: 4 MiB.
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class ServerSettings:
    """How ``dynoqueue serve`` runs (the command's options).

    Attributes:
        url, zones, local_zone, prefix: the deployment, as the builders take them.
        token: the bearer token every route but ``GET /`` and ``GET /healthz`` requires
            (None: no auth, loopback only).
        retention_ms: how long acked, expired and deleted messages stay queryable through
            getMsg, for topics whose queue has no stored policy yet (Camellia: 5 minutes).
        ack_timeout_ms, ttl_ms, max_retry: Camellia's server defaults (30 s, 1 h, 10).
        long_polling_timeout_ms: longPollingMsg's default hold (Camellia's SDK: 10 s; held
            at most ``max_long_poll_ms``).
        unack_interval_ms: how often expired leases and TTLs of the served topics are handled.
        youzan_ttr_s: Youzan's default TTR, seconds.
        index_sweep_ms: how often Youzan's id -> topic index drops jobs that ended elsewhere.
        max_body_bytes: the largest request body read, bytes (default 4 MiB: a message is at
            most 1 MiB, its form encoding up to three times that); a larger one gets 413.
        max_long_polls_per_client: held long polls (longPollingMsg, Youzan pop with a
            timeout) one client address may have at once (default 16); one more gets 429
            with Retry-After. Clients behind one proxy share its address, so its cap.
        max_long_poll_ms: the longest a long poll may hold its connection, ms (default 60 s):
            a longer longPollingTimeoutMillis (or Youzan timeout) gets 400.

    Raises:
        ConfigurationError: (a ValueError) a limit or default out of range.
    """

    url: str = "redis://localhost:6379"
    zones: tuple[str, ...] | None = None
    local_zone: str | None = None
    prefix: str = "dynoqueue"
    token: str | None = None
    retention_ms: int = 300_000
    ack_timeout_ms: int = 30_000
    ttl_ms: int = 3_600_000
    max_retry: int = 10
    long_polling_timeout_ms: int = 10_000
    unack_interval_ms: int = 500
    youzan_ttr_s: int = 30
    index_sweep_ms: int = 60_000
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_long_polls_per_client: int = 16
    max_long_poll_ms: int = 60_000

    def __post_init__(self) -> None:
        for name, low, high in (
                ("retention_ms", 0, MAX_MS), ("ack_timeout_ms", 1, MAX_MS), ("ttl_ms", 1, MAX_MS),
                ("max_retry", 0, MAX_COUNT - 1), ("long_polling_timeout_ms", 1, MAX_MS),
                ("unack_interval_ms", 1, MAX_MS), ("youzan_ttr_s", 1, MAX_MS // 1000),
                ("index_sweep_ms", 1, MAX_MS), ("max_body_bytes", 1, MAX_COUNT),
                ("max_long_polls_per_client", 1, MAX_COUNT), ("max_long_poll_ms", 1, MAX_MS)):
            int_at_least(name, getattr(self, name), low, high=high, error=ConfigurationError)

    @property
    def default_hold_ms(self) -> int:
        """A long poll's hold when the request names none: ``long_polling_timeout_ms``, at
        most ``max_long_poll_ms``."""
        return min(self.long_polling_timeout_ms, self.max_long_poll_ms)


@dataclass
class TopicMonitor:
    """Camellia's per-topic request counts and pull time gaps since ``started``."""

    requests: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    gaps_ms: list[float] = field(default_factory=list)


class ServerState:
    """The live objects behind the routes (made in the app's lifespan)."""

    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings
        self.registry = CollectorRegistry()
        self.metrics = QueueMetrics(self.registry)
        self.queues: RedisQueues | None = None
        self._topics: dict[str, DynoQueue] = {}
        self._lock = asyncio.Lock()
        self.monitor: dict[str, TopicMonitor] = defaultdict(TopicMonitor)
        self.monitor_started_ms = int(time.time() * 1000)
        self.youzan_index = youzan_index(settings.prefix)
        #: The held pulls, one dispatching pop per topic.
        self.polls = LongPolls()
        #: Client address -> the deadlines (monotonic s) of its held long polls.
        self._held: dict[str, list[float]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    async def open(self) -> None:
        s = self.settings
        self._loop = asyncio.get_running_loop()
        queues = RedisQueues.from_url(
            s.url, zones=list(s.zones) if s.zones else None,
            local_zone=s.local_zone or (s.zones[0] if s.zones else None), key_prefix=s.prefix,
            unack_handler_interval_ms=s.unack_interval_ms)
        await queues.__aenter__()
        queues.set_events(self._observe)
        self.queues = queues
        # Every queue already in Redis is served from the start, so its expired leases and
        # TTLs are handled even before a request names it (Camellia schedules every topic).
        for name in await list_queues_async(queues):
            try:
                await self.topic(name)
            except DynoQueueError as exc:  # a name this layout cannot serve
                log.warning("not serving queue %r: %s", name, exc)

    def stopping(self) -> None:
        """The server was told to stop (SIGTERM, Ctrl-C): answer the held long polls now,
        empty (:meth:`LongPolls.stop_holding`). Safe from a signal handler or another
        thread."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self.polls.stop_holding)

    async def close(self) -> None:
        await self.polls.close()
        if self.queues is not None:
            await self.queues.aclose()

    def factory(self) -> RedisQueues:
        assert self.queues is not None, "the server's lifespan has not started"
        return self.queues

    def _observe(self, queue: str, kind: str, count: int) -> None:
        self.metrics(queue, kind, count)
        if count and kind == "redelivered":
            self.monitor[queue].requests["triggerMsgTimeout"] += count
        elif count and kind in ("expired", "dead_lettered"):
            self.monitor[queue].requests["triggerMsgEndLife"] += count

    @contextlib.contextmanager
    def long_poll_slot(self, client: str, hold_ms: int) -> Iterator[None]:
        """Hold one of ``client``'s long-poll slots for the block (a long poll of up to
        ``hold_ms``).

        Raises:
            BadRequest: 429 when ``client`` already holds ``max_long_polls_per_client``; its
                Retry-After header is the seconds until the first of them ends at the latest.
        """
        held = self._held.setdefault(client, [])
        now = time.monotonic()
        cap = self.settings.max_long_polls_per_client
        if len(held) >= cap:
            retry_s = max(1, math.ceil(min(held) - now))
            raise BadRequest(f"too many held long polls from {client}: at most {cap} at once",
                             429, {"Retry-After": str(retry_s)})
        deadline = now + hold_ms / 1000
        held.append(deadline)
        try:
            yield
        finally:
            held.remove(deadline)
            if not held:
                del self._held[client]

    def count(self, topic: str, request: str) -> None:
        self.monitor[topic].requests[request] += 1

    def gap(self, topic: str, lateness_ms: float) -> None:
        # The lateness histogram is fed by the core's events for every pop (QueueMetrics).
        self.monitor[topic].gaps_ms.append(lateness_ms)

    async def topic(self, topic: str) -> DynoQueue:
        """The queue of ``topic``: with the server's retention policy if the queue has none
        stored, else as stored (every process must apply one policy).

        Raises:
            ConfigurationError: (a ValueError) a name a queue cannot have.
        """
        found = self._topics.get(topic)
        if found is not None:
            return found
        check_queue_name(topic, "topic")
        async with self._lock:
            found = self._topics.get(topic)
            if found is None:
                queues = self.factory()
                stored = await queues.quorum_conn.get(queues.keys_of(topic).policy)
                policy = None if stored else QueuePolicy(retention_ms=self.settings.retention_ms)
                found = queues.get(topic, policy)
                self._topics[topic] = found
            return found

    def served(self) -> list[str]:
        return sorted(self._topics)

    # ------------------------------------------------------------------ Youzan's index

    async def index_get(self, job_id: str) -> dict[str, Any] | None:
        raw = await self.factory().quorum_conn.hget(self.youzan_index, job_id)
        if not raw:
            return None
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return None
        return doc if isinstance(doc, dict) else None

    async def index_set(self, job_id: str, topic: str, ttr_s: int) -> None:
        """Index ``job_id`` before its push; ``at`` (epoch ms) tells the sweep that the push
        may still be on its way."""
        entry = {"topic": topic, "ttr": ttr_s, "at": int(time.time() * 1000)}
        await self.factory().quorum_conn.hset(self.youzan_index, job_id, orjson.dumps(entry))

    async def index_drop(self, job_id: str) -> None:
        await self.factory().quorum_conn.hdel(self.youzan_index, job_id)

    async def sweep_index(self, batch: int = 500) -> int:
        """Drop index entries whose job is gone or ended (acked, expired or removed by another
        client); dead letters keep theirs (they can be redriven). An entry whose job is not in
        Redis is kept while it is younger than a call deadline: its add may still be pushing
        the job (the add indexes first, so that a crash leaves an entry to sweep, never a job
        nobody can finish). Returns how many dropped."""
        client = self.factory().quorum_conn
        in_flight_ms = self.factory().settings.call_timeout_ms
        dropped = 0
        cursor: Any = 0
        while True:
            cursor, entries = await client.hscan(self.youzan_index, cursor, count=batch)
            now_ms = int(time.time() * 1000)
            for raw_id, raw in entries.items():
                job_id = raw_id.decode() if isinstance(raw_id, bytes) else str(raw_id)
                indexed_ms = 0
                try:
                    entry = orjson.loads(raw)
                    indexed_ms = int(entry.get("at", 0))
                    queue = await self.topic(str(entry["topic"]))
                    state = await queue.state(job_id)
                except Exception:  # an unreadable entry or a topic it cannot name
                    state = None
                if state is None and now_ms - indexed_ms < in_flight_ms:
                    continue  # not pushed yet, or never will be: see next sweep
                if state is None or state.name in ("ACKED", "EXPIRED", "DELETED"):
                    await client.hdel(self.youzan_index, job_id)
                    dropped += 1
            if int(cursor) == 0:
                return dropped

    async def sweep_loop(self) -> None:
        """Sweep Youzan's index every ``index_sweep_ms`` until cancelled."""
        while True:
            await asyncio.sleep(self.settings.index_sweep_ms / 1000)
            try:
                dropped = await self.sweep_index()
                if dropped:
                    log.info("youzan index: dropped %d ended jobs", dropped)
            except Exception:  # Redis down: try again next time
                log.exception("youzan index sweep failed")
