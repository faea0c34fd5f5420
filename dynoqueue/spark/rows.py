"""Values shared by the rows of both reads (batch and streaming): the states and timestamps.

This module does not import pyspark.
"""

from __future__ import annotations

from datetime import UTC, datetime

#: ``state`` of an id in a shard's queue zset (batch read only).
WAITING = "waiting"
#: ``state`` of an id in a shard's unack zset (leased): every streaming row, some batch rows.
UNACKED = "unacked"


def timestamp(ms: float | None) -> datetime | None:
    """Epoch ms -> an aware UTC datetime (a value of Spark's TimestampType), or None."""
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=UTC)
