"""How ``dynoqueue demo`` prints its :class:`~dynoqueue.demo.report.DemoReport`.

One table row per zone, then what the Workers' handler did, the crash, the calls the demo made,
the invariants and a one-line verdict. Every line fits 100 columns without breaking a value.
"""

from __future__ import annotations

from typing import Any, Literal

from .flights import AIRPORT_ZONES
from .printing import mark_nonzero, print_header, print_invariants
from .report import CrashInfo, DemoReport

#: The file whose code makes the calls the report's "what the demo did" section names.
SOURCE_FILE = "dynoqueue/demo/run.py"

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
