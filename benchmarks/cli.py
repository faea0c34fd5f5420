"""``dynoqueue bench``: the benchmark suite's command line (``add_parser`` is called by
:mod:`dynoqueue.cli`). Importing this module is cheap: the suite, the peers, rich and
matplotlib are imported only when the command runs.

Also runnable as ``python -m benchmarks.cli [options]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from dynoqueue.cli_args import int_at_least

_LIBRARIES = ["dynoqueue", "bullmq", "rq", "dramatiq", "huey", "saq"]
_SECTIONS = ["core", "worker", "serve", "ordering", "lifecycle", "scale", "frameworks"]
#: Sections that start their own servers and processes (a Cluster, framework workers) and
#: print their own report after the suite's tables: benchmarks.scale, benchmarks.frameworks.
_OWN_SECTIONS = ("scale", "frameworks")


def _libraries(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in _LIBRARIES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown libraries {unknown}; choose from {', '.join(_LIBRARIES)}")
    return names



def _sections(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in _SECTIONS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown sections {unknown}; choose from {', '.join(_SECTIONS)}")
    return names


def _depths(text: str) -> list[int]:
    try:
        depths = [int(n.replace("_", "")) for n in text.split(",") if n.strip()]
    except ValueError:
        depths = []
    if not depths or any(d < 1 for d in depths):
        raise argparse.ArgumentTypeError(f"expected positive integers like 1000,1000000, "
                                         f"got {text!r}")
    return depths


def configure(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``bench`` options to ``parser`` and set its handler; return the parser."""
    parser.add_argument("--quick", action="store_true",
                        help="small sizes, one run, two consumer processes (~70 s, CI smoke)")
    parser.add_argument("--out", type=Path, default=Path("bench-results"), metavar="DIR",
                        help="where results.json, results.md and the PNG plots go "
                             "(default: bench-results)")
    parser.add_argument("--runs", type=int_at_least(1), metavar="N",
                        help="repeat every measurement N times (default 3; --quick 1)")
    parser.add_argument("--procs", type=int_at_least(1), metavar="N",
                        help="consumer processes of the 'several consumers' workload "
                             "(default 4; --quick 2)")
    parser.add_argument("--libraries", type=_libraries, metavar="A,B",
                        help=f"only these (default all: {','.join(_LIBRARIES)})")
    parser.add_argument("--sections", type=_sections, metavar="A,B",
                        help="only these sections (default all: core = workloads 1-7, "
                             "worker = the Worker vs batched pop+ack and the peers' workers, "
                             "serve = dynoqueue serve over HTTP, ordering = strict priority "
                             "and groups vs a plain queue, lifecycle = pop+ack with delivery "
                             "counting and with max_deliveries + TTL, nack with a delay, vs the "
                             "pre-lifecycle code, scale = a deep backlog on an embedded Cluster "
                             "(benchmarks.scale), frameworks = Celery and Dramatiq on dynoqueue "
                             "vs their own Redis brokers (benchmarks.frameworks))")
    parser.add_argument("--messages", type=int_at_least(10), metavar="N",
                        help="messages of the scale section (default 10000000; --quick 20000)")
    parser.add_argument("--primaries", type=int_at_least(1), metavar="N",
                        help="Cluster primaries of the scale section (default 3)")
    parser.add_argument("--partitions", type=int_at_least(1), metavar="N",
                        help="partitions of the scale section's queue (default 4 x primaries)")
    parser.add_argument("--lifecycle-messages", type=int_at_least(500), metavar="N",
                        help="due messages per lifecycle case and round (default 50000; "
                             "--quick 5000)")
    parser.add_argument("--ordering-depths", type=_depths, metavar="N,N",
                        help="waiting messages of the ordering rows (default 1000,1000000; "
                             "--quick 1000,20000); 1000 alone skips the 1M rows (~2 min of "
                             "filling)")
    parser.add_argument("--profile", action="store_true",
                        help="also profile dynoqueue's push/pop/ack (cProfile; done anyway "
                             "when a goal is missed, except with --quick)")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.set_defaults(handler=run_command)
    return parser


def add_parser(commands: Any) -> None:
    """Add the ``bench`` subcommand to an ``argparse`` subparsers object."""
    bench = commands.add_parser(
        "bench",
        help="benchmark suite: dynoqueue vs bullmq, rq, dramatiq, huey, saq and the Redis limit",
        description="Start an embedded redis-server and measure enqueue, dequeue+ack, delivery "
                    "lateness, cost vs depth, memory and commands per message for dynoqueue "
                    "and its peers (each through its public API, workers doing no work), and "
                    "the Redis limit for the same commands; then dynoqueue.asyncio against the "
                    "sync API and the asyncio peers (bullmq, saq), including one-per-call "
                    "enqueues from 100 concurrent tasks; then dynoqueue's Worker against the "
                    "batched consumer and the peers' workers, `dynoqueue serve` over HTTP, "
                    "and pop+ack with strict priority and ordered groups against a plain "
                    "queue at 1k and 1M waiting, and the message lifecycle's costs against "
                    "the pre-lifecycle code. Prints a table per workload "
                    "(median of the runs, [min-max]) and the goals; writes results.json, "
                    "results.md and PNG plots to --out.",
    )
    configure(bench)


def run_command(args: argparse.Namespace) -> int:
    """Run the suite for parsed ``args``; print the tables; write the files.

    Returns:
        0 when it ran (goals missed are reported, not an error); 2 when a prerequisite is
        missing (rich or matplotlib).
    """
    try:
        from rich.console import Console
    except ImportError:
        print("dynoqueue bench needs the bench extra: pip install -e '.[bench]'", file=sys.stderr)
        return 2
    from .suite import Options

    opts = Options.quick_mode() if args.quick else Options()
    if args.runs:
        opts.runs = opts.lifecycle_rounds = args.runs
    if args.procs:
        opts.procs = args.procs
    if args.libraries:
        opts.libraries = args.libraries
    # Default: every section; --quick leaves out the frameworks' worker processes.
    opts.sections = args.sections or [name for name in _SECTIONS
                                      if not (args.quick and name == "frameworks")]
    if args.ordering_depths:
        opts.ordering_depths = args.ordering_depths
    if args.lifecycle_messages:
        opts.lifecycle_messages = args.lifecycle_messages
    opts.profile = args.profile
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)
    own = [name for name in opts.sections if name in _OWN_SECTIONS]
    opts.sections = [name for name in opts.sections if name not in _OWN_SECTIONS]
    if opts.sections:
        status = _suite(args, opts, console)
        if status:
            return status
    for name in own:
        text = _own_section(name, args)
        console.print(text, highlight=False)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"{name}.txt").write_text(text + "\n")
    return 0


def _own_section(name: str, args: argparse.Namespace) -> str:
    """Run the scale or the frameworks section; its report as text."""
    if name == "scale":
        from . import scale

        options = argparse.Namespace(
            messages=args.messages or (20_000 if args.quick else 10_000_000),
            primaries=args.primaries or 3, procs=args.procs or 2, batch=500,
            expired=1_000 if args.quick else 100_000, partitions=0)
        options.partitions = args.partitions or 4 * options.primaries
        return scale.report(scale.run(options))
    from . import frameworks

    options = argparse.Namespace(tasks=1_000 if args.quick else 10_000,
                                 eta_tasks=2_000 if args.quick else 50_000,
                                 runs=args.runs or (1 if args.quick else 3), pool="prefork",
                                 concurrency=2)
    return frameworks.report(frameworks.run(options))


def _suite(args: argparse.Namespace, opts: Any, console: Any) -> int:
    """The suite's sections: run, print the tables, write results, plots and profile."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from . import report
    from .suite import profile_core, run

    started = time.monotonic()
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/"
                  "{task.total}"), TimeElapsedColumn(), console=console, transient=True) as bar:
        task = bar.add_task("starting redis-server", total=None)

        def progress(label: str, done: int, total: int) -> None:
            bar.update(task, description=label, completed=done, total=total)
            if not console.is_terminal and label != "done":
                console.print(f"[{time.monotonic() - started:5.0f} s] {label}",
                              highlight=False)

        results = run(opts, progress)
    missed = [g for g in report.goals(results) if g["met"] is False]
    # A missed goal brings a profile along, except in the ~1 min smoke run (--quick).
    if missed and not args.quick and "profile" not in results \
            and "dynoqueue" in opts.libraries and "core" in opts.sections:
        from dynoqueue.embedded import single

        from .workloads import Server

        with single() as server:
            admin = server.client(decode_responses=True)
            results["profile"] = profile_core(
                Server(f"redis://127.0.0.1:{server.port}/0", server.port, admin))
            admin.close()
    for table in report.tables(results):
        console.print(table.rich())
        console.print()
    paths = report.write(results, args.out)
    written = [paths["json"], paths["markdown"]]
    if not args.no_plots and "core" in opts.sections:
        from .plots import write_all

        written += write_all(results, args.out)
    if results.get("profile"):
        (args.out / "profile.txt").write_text(results["profile"])
        written.append(args.out / "profile.txt")
    meta = results["meta"]
    console.print(f"wall time {meta['wall_s']:.0f} s; load average before "
                  f"{meta['load_before'][0]:.2f}, after {meta['load_after'][0]:.2f}; wrote "
                  + ", ".join(str(p) for p in written), highlight=False)
    if missed:
        console.print("goals missed: " + "; ".join(g["goal"] for g in missed), highlight=False)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.cli``: the same options as ``dynoqueue bench``."""
    parser = configure(argparse.ArgumentParser(prog="python -m benchmarks.cli"))
    args = parser.parse_args(argv)
    return int(args.handler(args))


if __name__ == "__main__":
    raise SystemExit(main())
