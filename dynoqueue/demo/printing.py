"""What both flight demos print the same way (``dynoqueue demo`` and the Spark demo): the
report's header lines, its checked invariants, and counts that must be 0."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Invariant:
    """One checked property of a run.

    Attributes:
        name: short description, e.g. ``"lost == 0"``.
        ok: whether it held.
        detail: the measured value(s).
    """

    name: str
    ok: bool
    detail: str


def mark_nonzero(value: int) -> str:
    """``value`` as rich markup, red unless 0 (for lost/early counts that must be 0)."""
    return str(value) if value == 0 else f"[red]{value}[/]"


def print_header(out: Any, rows: list[tuple[str, str]]) -> None:
    """Print a report's ``name  value`` header lines (names dim) on a rich Console.

    A value too long for the line wraps between words, never inside one.
    """
    from rich.table import Table

    header = Table.grid(padding=(0, 2))
    header.add_column(style="dim", no_wrap=True)
    header.add_column()
    for name, value in rows:
        header.add_row(name, value)
    out.print(header)


def print_invariants(out: Any, invariants: list[Invariant]) -> None:
    """Print each checked property as ``ok``/``FAIL`` with its measured detail."""
    for inv in invariants:
        mark = "[green]ok[/]  " if inv.ok else "[red]FAIL[/]"
        out.print(f"  {mark} {inv.name}: {inv.detail}")
