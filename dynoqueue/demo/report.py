"""What ``dynoqueue demo`` measured, and how it is printed.

One table row per zone, keyed by the zone whose consumers (Workers) took the reminders: a
zone's Workers pop only their own zone's shard, so the row is also that shard, and every column
of it counts the same reminders. A second table says what the Workers' handler did with them
(sent, postponed, retried, dead-lettered). The producers (one per airport) are a header line,
not rows. Every line fits 100 columns without breaking a value. The printers :func:`print_header`,
:func:`print_invariants` and :func:`mark_nonzero` are shared with the Spark demo
(:mod:`dynoqueue.flights.printing`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Literal

from ..flights.data import AIRPORT_ZONES
from ..flights.printing import Invariant, mark_nonzero, print_header, print_invariants

#: The file whose code makes the calls the report's "what the demo did" section names.
SOURCE_FILE = "dynoqueue/demo/run.py"


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
# Output
# --------------------------------------------------------------------------------------------

# (header, justify): whole words, so that no header breaks inside a word either.
_COLUMNS: tuple[tuple[str, Literal["left", "right"]], ...] = (
    ("zone", "left"),
    ("pushed\nhere", "right"),
    ("times\npopped", "right"),
    ("repeats¹", "right"),
    ("acked", "right"),
    ("dead\nletters", "right"),
    ("lost", "right"),
    ("early", "right"),
    ("late\nms\np50", "right"),
    ("late\nms\np99", "right"),
    ("late\nms\nmax", "right"),
    ("left in\nshard\nat end", "right"),
)


def render_report(report: DemoReport, console: Any = None, *, quiet: bool = False) -> None:
    """Print a report with rich: header, one row per consuming zone and a total, the crash,
    the calls the demo made, the invariants, and a one-line verdict last.

    Every line fits 100 columns; header values and table cells are never broken inside.

    Args:
        report: what :func:`~dynoqueue.demo.run_demo` returned.
        console: a ``rich.console.Console``; default one on stdout.
        quiet: print only the one-line verdict.
    """
    from rich.console import Console

    out: Console = console if console is not None else Console()
    if not quiet:
        out.print(f"[bold]dynoqueue demo[/]: boarding reminders for {report.day:%a} "
                  f"{report.day.isoformat()}, {report.flights} flights from EWR, JFK and LGA")
        print_header(out, _header_rows(report))
        out.print()
        _print_table(out, report)
        _print_crash(out, report)
        out.print()
        _print_handlers(out, report)
        if report.error_count:
            out.print(f"[yellow]{report.error_count} recovered Redis errors[/], e.g. "
                      f"{report.errors[0]}")
        out.print()
        _print_calls(out, report)
        out.print()
        print_invariants(out, report.invariants)
    t = report.total
    if report.ok:
        out.print(f"[bold green]OK[/]: {t.acked}/{report.flights} sent, {t.dead_lettered} "
                  f"dead-lettered, 0 lost, 0 early; late p50 {_ms(t.lateness.p50)} ms, "
                  f"p99 {_ms(t.lateness.p99)} ms")
    else:
        names = "; ".join(f"{inv.name} ({inv.detail})" for inv in report.failed)
        out.print(f"[bold red]FAILED[/]: {names}")


def _header_rows(report: DemoReport) -> list[tuple[str, str]]:
    producers = ", ".join(f"{airport} {count} from {AIRPORT_ZONES.get(airport, '?')}"
                          for airport, count in report.producers.items())
    rows = [
        ("time", f"day compressed {report.compression:,.0f}x: the reminders fall due over "
                 f"{report.schedule_s:.1f} s (run: {report.elapsed_s:.1f} s)"),
        ("redis", report.topology),
        *(("", node) for node in report.nodes),
        ("queue", f"{report.queue}, key prefix {report.key_prefix}"
                  + (f", max_deliveries={report.max_deliveries}" if report.max_deliveries
                     else "")),
        ("pushed", producers),
    ]
    return rows


def _print_table(out: Any, report: DemoReport) -> None:
    from rich import box
    from rich.table import Table

    out.print("[bold]reminders by the zone that consumed them[/] (zone us-east-1x pops shard x)")
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1), collapse_padding=True)
    for header, justify in _COLUMNS:
        table.add_column(header, justify=justify, vertical="bottom", no_wrap=True)
    rows = [*report.zones, report.total]
    for i, row in enumerate(rows):
        late = row.lateness
        table.add_row(
            row.zone, str(row.pushed), str(row.popped), str(row.redelivered), str(row.acked),
            str(row.dead_lettered), mark_nonzero(row.lost), mark_nonzero(row.early),
            _ms(late.p50), _ms(late.p99), _ms(late.max),
            "?" if row.left < 0 else mark_nonzero(row.left),
            end_section=i == len(rows) - 2,
            style="bold" if row is report.total else None,
        )
    out.print(table)
    out.print(
        "[dim]pushed here: put in this zone's shard by the producers (round robin). times popped: "
        "deliveries to this zone's Workers, repeats and the killed Worker's included. acked, "
        "dead letters, lost: distinct reminders. late ms: handler call - due time, over first "
        "deliveries to live Workers. left in shard at end: waiting + leased, as the zone's own "
        "node sees it.[/]"
    )


def _print_crash(out: Any, report: DemoReport) -> None:
    crash = report.crash
    what = ("¹ repeats: deliveries of a reminder delivered before: postponed, retried, or put "
            "back after a lease ran out.")
    if crash is None:
        out.print(f"{what} No Worker was killed in this run.")
        return
    if not crash.held:
        out.print(f"{what} The doomed Worker in {crash.zone} never got a message.")
        return
    held = (f"{what} A Worker process in {crash.zone} (concurrency {crash.concurrency}) was "
            f"killed with SIGKILL while its handler hung on {crash.held} reminders.")
    if not crash.recovered:
        out.print(f"{held} No live Worker delivered them again before the run ended (their "
                  f"leases last {crash.lease_ms} ms).")
        return
    span = ""
    if crash.recovery_ms:
        low, high = crash.recovery_ms
        span = f", {low} ms after the kill" if low == high else f", {low}-{high} ms after the kill"
    if set(crash.redelivered_in) == {crash.zone}:
        again = (f"the live Workers in {crash.zone} delivered {_all(crash)} again{span}. So "
                 f"the kill's repeats are counted in {crash.zone}'s row")
    else:
        again = "live Workers delivered {} again{}: {}".format(_all(crash), span, ", ".join(
            f"{n} in {zone}" for zone, n in crash.redelivered_in.items()))
    out.print(f"{held} Its heartbeats stopped, so their {crash.lease_ms} ms leases ran out; "
              f"{crash.zone}'s lease sweeps put them back in the same shard, and {again}.")


_HANDLER_COLUMNS: tuple[str, ...] = ("zone", "handler\ncalls", "sent", "postponed", "retried",
                                     "dead-\nlettered")


def _print_handlers(out: Any, report: DemoReport) -> None:
    from rich import box
    from rich.table import Table

    out.print("[bold]what the live Workers' handler did[/] (each call ends one way)")
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1), collapse_padding=True)
    for i, header in enumerate(_HANDLER_COLUMNS):
        table.add_column(header, justify="left" if i == 0 else "right", vertical="bottom",
                         no_wrap=True)
    rows = [*report.zones, report.total]
    for i, row in enumerate(rows):
        table.add_row(row.zone, str(row.handled), str(row.acked), str(row.postponed),
                      str(row.retried), str(row.dead_lettered), end_section=i == len(rows) - 2,
                      style="bold" if row is report.total else None)
    out.print(table)
    out.print(
        "[dim]sent: the handler returned; the Worker acked. postponed: the flight left late "
        "(dep_delay), so the handler raised Retry(delay) to remind that much later. retried: "
        "the simulated SMS gateway timed out on a first send; the Worker nacked with backoff. "
        "dead-lettered: a cancelled flight (no dep_time); the handler raised DeadLetterNow.[/]"
    )
    if report.dead_letters:
        out.print(f"dead letters ({len(report.dead_letters)}, queue.dead_letters()): "
                  + ", ".join(report.dead_letters))


def _all(crash: CrashInfo) -> str:
    return f"all {crash.held}" if crash.recovered == crash.held else (
        f"{crash.recovered} of the {crash.held}")


def _print_calls(out: Any, report: DemoReport) -> None:
    from rich.table import Table

    out.print(f"[bold]what the demo did[/] (code: {SOURCE_FILE})")
    calls = Table.grid(padding=(0, 2))
    calls.add_column(no_wrap=True)
    calls.add_column()
    for call in report.calls:
        calls.add_row(f"  {call.call}", call.what)
    out.print(calls)


def _ms(value: int | None) -> str:
    return "-" if value is None else str(value)
