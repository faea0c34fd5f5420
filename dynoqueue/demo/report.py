"""What ``dynoqueue demo`` measured, and how its books become the report.

One table row per zone, keyed by the zone whose consumers (Workers) took the reminders: a
zone's Workers pop only their own zone's shard, so the row is also that shard, and every column
of it counts the same reminders. A second table says what the Workers' handler did with them
(sent, postponed, retried, dead-lettered). The producers (one per airport) are a header line,
not rows. :func:`build_report` makes the report from the run's books
(:class:`~dynoqueue.demo.books.Tracker`); :mod:`dynoqueue.demo.render` prints it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date

from .books import Tracker
from .flights import AIRPORT_ZONES, QUEUE_NAME, ZONES, Reminder
from .options import DemoOptions
from .printing import Invariant
from .topology import Topology


@dataclass
class Lateness:
    """Lateness of deliveries (delivery observed minus due time), in ms.

    Attributes:
        count: how many deliveries were measured.
        p50, p99, max: nearest-rank percentiles and maximum; None when ``count`` is 0.
    """

    count: int = 0
    p50: int | None = None
    p99: int | None = None
    max: int | None = None

    @classmethod
    def of(cls, samples: Sequence[int]) -> Lateness:
        """Summarise samples (ms)."""
        if not samples:
            return cls()
        ordered = sorted(samples)
        return cls(len(ordered), _nearest_rank(ordered, 50), _nearest_rank(ordered, 99),
                   ordered[-1])


@dataclass
class ZoneStats:
    """One row of the report: what one zone's consumers did, or the total of every zone.

    A zone's consumers pop only that zone's shard (``us-east-1b`` pops shard ``b``), and a
    reminder stays in the shard its push put it in, also when it is delivered again. So every
    count of a row is about the reminders of one shard.

    Attributes:
        zone: the consuming zone (``"total"`` for the total row).
        shard: the shard this zone's consumers pop ("" for the total row).
        pushed: reminders the producers (every airport's) put in this shard.
        popped: deliveries to this zone's Workers: messages their pops returned, the killed
            Worker's and repeated deliveries included.
        redelivered: deliveries here of a reminder that had been delivered before (postponed,
            retried, or put back after the killed Worker's lease ran out).
        acked: distinct reminders this zone's Workers sent and acked.
        dead_lettered: distinct reminders this zone's Workers dead-lettered (cancelled flights).
        lost: reminders pushed to this shard and neither acked nor dead-lettered; must be 0.
        early: deliveries here seen before the reminder was due; must be 0.
        lateness: over first deliveries here to a live consumer (the crashed consumer's are
            left out: their redelivery time is in :class:`CrashInfo`).
        waiting: messages still waiting in the shard at the end, read through the zone's own
            node; -1 if it could not be read.
        leased: messages still leased (popped, never acked) in the shard at the end; -1 if
            unknown.
        handled: calls of the live Workers' handler here; each ends as exactly one of
            acked (sent), postponed, retried or dead-lettered.
        postponed: handler calls that raised Retry: the flight left late, so the reminder is
            due again that much later.
        retried: handler calls that failed (the simulated SMS gateway timed out): the Worker
            nacked them with its backoff.
    """

    zone: str
    shard: str = ""
    pushed: int = 0
    popped: int = 0
    redelivered: int = 0
    acked: int = 0
    dead_lettered: int = 0
    lost: int = 0
    early: int = 0
    lateness: Lateness = field(default_factory=Lateness)
    waiting: int = 0
    leased: int = 0
    handled: int = 0
    postponed: int = 0
    retried: int = 0

    @property
    def left(self) -> int:
        """Messages left in the shard at the end (waiting + leased); -1 if unknown."""
        return -1 if self.waiting < 0 or self.leased < 0 else self.waiting + self.leased


@dataclass
class CrashInfo:
    """What the killed Worker did, and where its reminders were delivered again.

    Attributes:
        zone: where it ran (it popped that zone's shard).
        held: how many messages it was delivered and never acked (its handler hung).
        recovered: how many of those a live consumer delivered later.
        recovery_ms: time from the crashed pop to the live redelivery, min and max (ms).
        redelivered_in: zone -> how many of the held messages its live consumers delivered.
        lease_ms: the lease of each pop (the unack timeout), ms.
        concurrency: the killed Worker's handlers (the most it could hold).
    """

    zone: str
    held: int = 0
    recovered: int = 0
    recovery_ms: tuple[int, int] | None = None
    redelivered_in: dict[str, int] = field(default_factory=dict)
    lease_ms: int = 0
    concurrency: int = 0


@dataclass
class ApiCall:
    """One line of the report's "what the demo did" section.

    Attributes:
        call: the dynoqueue call as written in the code, e.g. ``"queue.pop(50)"``.
        what: what the run did with it, with counts.
    """

    call: str
    what: str


@dataclass
class DemoReport:
    """Everything a demo run measured. ``ok`` is True when every invariant held.

    Attributes:
        day: the day replayed.
        flights: how many reminders were scheduled.
        compression: day seconds per wall second used.
        schedule_s: wall seconds from the first reminder falling due to the last.
        topology: the Redis deployment, one short line (e.g. ``"local zone ring,
            write_quorum=1"``).
        nodes: one short line per Redis node or server, e.g.
            ``"us-east-1b replica 127.0.0.1:33395"``.
        queue: the queue's name.
        key_prefix: the run's key prefix.
        producers: origin airport -> reminders its producer pushed (from its own zone).
        zones: one row per consuming zone.
        total: the total row.
        crash: the killed Worker, or None when no crash was asked for.
        calls: the dynoqueue calls the run made, with counts.
        invariants: every checked property.
        elapsed_s: wall seconds from the first push to the last ack (or the deadline).
        errors: Redis errors the run recovered from (quorum misses, failed pops), at most 20.
        error_count: how many such errors there were.
        dead_letters: the queue's dead letters at the end, ``"EV3840/EWR-MEM"`` each, from
            ``queue.dead_letters()``.
        max_deliveries: the queue policy's limit (0: none).
    """

    day: date
    flights: int
    compression: float
    schedule_s: float
    topology: str
    nodes: list[str]
    queue: str
    key_prefix: str
    producers: dict[str, int]
    zones: list[ZoneStats]
    total: ZoneStats
    crash: CrashInfo | None
    calls: list[ApiCall]
    invariants: list[Invariant]
    elapsed_s: float
    errors: list[str] = field(default_factory=list)
    error_count: int = 0
    dead_letters: list[str] = field(default_factory=list)
    max_deliveries: int = 0

    @property
    def ok(self) -> bool:
        """True if every invariant held."""
        return all(inv.ok for inv in self.invariants)

    @property
    def failed(self) -> list[Invariant]:
        """The invariants that did not hold."""
        return [inv for inv in self.invariants if not inv.ok]


def _nearest_rank(ordered: Sequence[int], percent: float) -> int:
    index = max(0, math.ceil(percent / 100 * len(ordered)) - 1)
    return ordered[index]


# --------------------------------------------------------------------------------------------
# From the books to the report
# --------------------------------------------------------------------------------------------


def build_report(
    options: DemoOptions,
    reminders: list[Reminder],
    offsets: list[int],
    compression: float,
    topology: Topology,
    prefix: str,
    tracker: Tracker,
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


def _zone_row(name: str, shard: str, tracker: Tracker, size: tuple[int, int]) -> ZoneStats:
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


def _crash_info(options: DemoOptions, tracker: Tracker) -> CrashInfo | None:
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


def _invariants(total: ZoneStats, rows: list[ZoneStats], tracker: Tracker,
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


def _calls(options: DemoOptions, topology: Topology, tracker: Tracker) -> list[ApiCall]:
    """The dynoqueue calls of the run, as written in :mod:`dynoqueue.demo.run`, with what they
    did."""
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
