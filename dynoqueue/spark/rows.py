"""What the reads return: their schemas and column lists (defined once, here), the schema check,
the row states and timestamps.

Two read schemas exist: the queue's (batch and streaming reads, :data:`SCHEMA`) and the dead
letters' (batch read with option ``deadLetters``, :data:`DEAD_SCHEMA`). Each is written once as
(name, type) pairs; the DDL string and the column tuple are derived from it, so they cannot
disagree.

This module does not import pyspark.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from ..errors import ConfigurationError

#: ``state`` of an id in a shard's queue zset (batch read only).
WAITING = "waiting"
#: ``state`` of an id in a shard's unack zset (leased): every streaming row, some batch rows.
UNACKED = "unacked"

_FIELDS: tuple[tuple[str, str], ...] = (
    ("id", "string not null"),
    ("payload", "string"),
    ("priority", "int"),
    ("timeout", "long"),
    ("shard", "string"),
    ("state", "string"),  # waiting / unacked: kept as it was for existing readers
    ("due", "timestamp"),
    ("lease_expiry", "timestamp"),
    ("claimed_at", "timestamp"),
    ("batch", "long"),
    # The lifecycle columns, appended so that positions of the columns above stay put.
    ("lifecycle_state", "string"),  # MessageState name: DELAYED, READY or LEASED
    ("deliveries", "int"),
    ("max_deliveries", "int"),
    ("expires_at", "timestamp"),
    ("last_error", "string"),
    ("group", "string"),  # the message's ordered group (Message.group), null when none
    ("headers", "map<string,string>"),  # Message.headers, null when none
)

_DEAD_FIELDS: tuple[tuple[str, str], ...] = (
    ("id", "string not null"),
    ("payload", "string"),
    ("priority", "int"),
    ("shard", "string"),
    ("reason", "string"),  # max_deliveries, ttl or undecodable
    ("deliveries", "int"),
    ("last_error", "string"),
    ("died_at", "timestamp"),
    ("headers", "map<string,string>"),  # the dead message's headers, null when none
)


def _ddl(fields: tuple[tuple[str, str], ...]) -> str:
    return ", ".join(f"{name} {kind}" for name, kind in fields)


#: What every queue read (batch or stream) returns. Batch reads leave ``claimed_at`` and
#: ``batch`` null; stream reads leave ``due``, ``max_deliveries``, ``expires_at`` and
#: ``last_error`` null (a claim returns none of them).
SCHEMA = _ddl(_FIELDS)
COLUMNS = tuple(name for name, _ in _FIELDS)

#: What a batch read with option ``deadLetters`` returns: one row per dead letter.
DEAD_SCHEMA = _ddl(_DEAD_FIELDS)
DEAD_COLUMNS = tuple(name for name, _ in _DEAD_FIELDS)


def read_schema(dead_letters: bool) -> str:
    """The DDL schema of a read: :data:`DEAD_SCHEMA` with option ``deadLetters``, else
    :data:`SCHEMA`."""
    return DEAD_SCHEMA if dead_letters else SCHEMA


def check_read_schema(names: Sequence[str], dead_letters: bool, shown: str) -> None:
    """Refuse a schema given to a read (``.schema(...)``): the read's schema is fixed.

    Args:
        names: the field names Spark passes to ``reader()`` / ``streamReader()``.
        dead_letters: whether the read has option ``deadLetters``.
        shown: the schema as text, for the message.

    Raises:
        ConfigurationError: (a ValueError) the names are not the read's columns, in order.
    """
    expected = DEAD_COLUMNS if dead_letters else COLUMNS
    if tuple(names) != expected:
        raise ConfigurationError(
            f"dynoqueue: the read schema is fixed ({read_schema(dead_letters)}); do not pass "
            f".schema(...), select columns after load() instead (got {shown})"
        )


def timestamp(ms: float | None) -> datetime | None:
    """Epoch ms -> an aware UTC datetime (a value of Spark's TimestampType), or None."""
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=UTC)
