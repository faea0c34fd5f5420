"""The ``dynoqueue spark-demo`` subcommand (argument parsing only; pyspark is imported on run)."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(commands: Any) -> None:
    """Add the ``spark-demo`` subparser to ``commands`` (an argparse sub-parsers action).

    The handler, ``args.handler(args)``, returns the process exit code.
    """
    demo = commands.add_parser("spark-demo",
                               help="boarding reminders for a month of flights, on Spark")
    demo.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    print("dynoqueue spark-demo: not implemented yet")
    return 2
