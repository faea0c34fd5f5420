"""Argument types shared by the ``dynoqueue`` subcommands (demo, spark-demo, bench).

Each turns a bad value into ``argparse.ArgumentTypeError``, which argparse reports as a usage
error (exit code 2) naming the option.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable


def positive_float(text: str) -> float:
    """A finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}")
    return value


def int_at_least(low: int) -> Callable[[str], int]:
    """An integer >= ``low``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {value}")
        return value

    return parse
