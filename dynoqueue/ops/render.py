"""Output of the ops subcommands: a table (rich when installed, plain columns otherwise) or
JSON (``--json``), on stdout."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from ..model.policy import QueuePolicy


def emit_json(value: Any) -> None:
    """Print ``value`` as indented JSON (keys in the given order)."""
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n")
    sys.stdout.flush()


def cell(value: Any, width: int = 60) -> str:
    """One table cell: None as "-", long text cut to ``width`` characters."""
    if value is None:
        return "-"
    text = str(value).replace("\n", " ")
    return text if len(text) <= width else text[:width - 1] + "…"


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]],
          console: Any = None) -> Any:
    """A rich Table (or, without rich, the plain-text lines) of ``rows``."""
    try:
        from rich.table import Table
    except ImportError:  # the core install: plain columns
        return _plain(title, columns, rows)
    out = Table(title=title, title_justify="left")
    for name in columns:
        numeric = bool(rows) and all(isinstance(row[columns.index(name)], (int, float))
                                     for row in rows)
        out.add_column(name, justify="right" if numeric else "left")
    for row in rows:
        out.add_row(*(cell(v) for v in row))
    return out


def _plain(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [list(columns)] + [[cell(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    lines = [title] + ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                       for r in cells]
    return "\n".join(lines)


def show(renderable: Any) -> None:
    """Print a table made by :func:`table` (wide enough not to wrap when piped)."""
    if isinstance(renderable, str):
        print(renderable)
        return
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        console = Console(width=160)
    console.print(renderable)


def pairs(title: str, fields: Mapping[str, Any]) -> Any:
    """A two-column table of ``fields`` (name, value)."""
    return table(title, ["field", "value"], [(k, v) for k, v in fields.items()])


#: What a queue with no stored policy (or one with every default) gets.
NO_POLICY = "none stored (no limits: dyno-queues' behaviour)"


def policy_text(policy: QueuePolicy | None) -> str:
    """A policy as one line of the fields that differ from the defaults, e.g.
    ``max_in_flight=2 rate_limit=10/1000ms``."""
    if policy is None:
        return NO_POLICY
    default = QueuePolicy()
    shown = []
    for name in (f.name for f in dataclasses.fields(QueuePolicy)):
        value = getattr(policy, name)
        if value == getattr(default, name):
            continue
        if name == "rate_limit":
            value = f"{value.count}/{value.per_ms}ms"
        elif isinstance(value, bool):
            value = str(value).lower()
        shown.append(f"{name}={value}")
    return " ".join(shown) or "the defaults (no limits: dyno-queues' behaviour)"
