"""What ``dynoqueue spark-demo`` measured (:class:`SparkDemoReport`, one :class:`HourStats`
row per hour), and how it is printed (:func:`render_spark_report`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from .flights import QUEUE_NAME
from .printing import Invariant, mark_nonzero, print_header, print_invariants


@dataclass
class HourStats:
    """One report row: the reminders due in one local hour of the original days, or the total.

    Attributes:
        hour: 0..23, or None for the total row.
        scheduled: reminders pushed.
        delivered: distinct reminders the stream delivered.
        duplicates: deliveries beyond each reminder's first (at-least-once redeliveries).
        lost: scheduled - delivered; must be 0.
        early: deliveries before the reminder's due time; must be 0.
        p50_ms, p99_ms, max_ms: lateness of first deliveries (delivered - due), wall ms.
    """

    hour: int | None
    scheduled: int = 0
    delivered: int = 0
    duplicates: int = 0
    lost: int = 0
    early: int = 0
    p50_ms: int | None = None
    p99_ms: int | None = None
    max_ms: int | None = None


@dataclass
class SparkDemoReport:
    """What a Spark demo run measured; ``ok`` is True when nothing was lost or early.

    Attributes:
        start, end: the period of scheduled departures.
        flights: reminders scheduled.
        compression: original seconds per wall second.
        schedule_s: wall seconds from the first reminder's due time to the last one's.
        topology: the Redis deployment, one line.
        key_prefix: the run's key prefix.
        hours: one row per local hour that had reminders; ``total``: the sum.
        batches: micro-batches the stream ran.
        queue_left: messages left in the queue at the end (waiting + leased).
        timings: wall seconds per phase (load, schedule, stream, report, total).
        invariants: every checked property.
        output_dir: the Parquet output (None if it was a temporary directory).
    """

    start: datetime
    end: datetime
    flights: int
    compression: float
    schedule_s: float
    topology: str
    key_prefix: str
    hours: list[HourStats]
    total: HourStats
    batches: int
    queue_left: int
    timings: dict[str, float]
    invariants: list[Invariant]
    output_dir: Path | None = None

    @property
    def ok(self) -> bool:
        """True if every invariant held."""
        return all(inv.ok for inv in self.invariants)


# --------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------


def render_spark_report(report: SparkDemoReport, console: Any = None, *,
                        quiet: bool = False) -> None:
    """Print a report with rich: header, one row per hour and a total, the invariants.

    Args:
        report: what :func:`run_spark_demo` returned.
        console: a ``rich.console.Console``; default one on stdout.
        quiet: print only the one-line verdict.
    """
    from rich import box
    from rich.console import Console
    from rich.table import Table

    out: Console = console if console is not None else Console()
    t = report.total
    if not quiet:
        span = f"{report.start:%Y-%m-%d %H:%M} .. {report.end:%Y-%m-%d %H:%M}"
        out.print(f"[bold]dynoqueue spark-demo[/]: boarding reminders for {report.flights:,} "
                  f"flights departing NYC {span} (local time)")
        print_header(out, [
            ("time", f"calendar compressed {report.compression:,.0f}x "
                     f"({86_400 / report.compression:g} s per day): reminders fall "
                     f"due over {report.schedule_s:.1f} s"),
            ("redis", report.topology),
            ("queue", f"{QUEUE_NAME}, key prefix {report.key_prefix}"),
            ("spark", f"{report.batches} micro-batches; phases: " + ", ".join(
                f"{k} {v:.1f} s" for k, v in report.timings.items())),
        ])
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1),
                      title="reminders by local hour of the original day",
                      title_justify="left")
        for column in ("hour", "sched", "deliv", "dup", "lost", "early", "late\np50 ms",
                       "late\np99 ms", "late\nmax ms"):
            table.add_column(column, justify="right", no_wrap=True)
        rows = [*report.hours, t]
        for i, row in enumerate(rows):
            table.add_row(
                "total" if row.hour is None else f"{row.hour:02d}",
                f"{row.scheduled:,}", f"{row.delivered:,}", f"{row.duplicates:,}",
                mark_nonzero(row.lost), mark_nonzero(row.early), _ms(row.p50_ms), _ms(row.p99_ms),
                _ms(row.max_ms), end_section=i == len(rows) - 2,
                style="bold" if row.hour is None else None)
        out.print(table)
        out.print("[dim]lateness: delivered (claimed by the stream) - due, in wall ms, over "
                  "first deliveries; dup: deliveries beyond the first (at-least-once).[/]")
        print_invariants(out, report.invariants)
    if report.ok:
        out.print(f"[bold green]OK[/]: {t.delivered:,}/{t.scheduled:,} delivered, 0 lost, "
                  f"0 early, {t.duplicates} duplicates; lateness p50 {_ms(t.p50_ms)} ms, "
                  f"p99 {_ms(t.p99_ms)} ms; {report.timings.get('total', 0):.0f} s in all")
    else:
        failed = "; ".join(f"{i.name} ({i.detail})" for i in report.invariants if not i.ok)
        out.print(f"[bold red]FAILED[/]: {failed}")


def _ms(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"

