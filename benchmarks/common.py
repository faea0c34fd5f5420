"""Shared pieces of the benchmark suite: message bodies, statistics, Redis stats, round trips.

Nothing here imports a peer library; every module of the suite may import this one.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

#: Bytes of padding in every message body, so a body is ~60 bytes ("small messages").
PAD = "x" * 24


@dataclass(frozen=True)
class Item:
    """One benchmark message before it is handed to a library.

    Attributes:
        id: unique id within one run, e.g. ``"m42"``.
        due_ms: when it should be delivered, epoch milliseconds (``time.time() * 1000``).
        body: what every library carries, ``{"id":..,"due":..,"pad":..}`` (~60 bytes), made
            before any timing starts.
    """

    id: str
    due_ms: float
    body: str

    def delay_ms(self, now_ms: float | None = None) -> int:
        """Milliseconds from ``now_ms`` (default: now) until due, rounded, never negative."""
        now = time.time() * 1000 if now_ms is None else now_ms
        return max(0, round(self.due_ms - now))

    def due_at_ms(self) -> int:
        """The due time as whole epoch ms (rounded, as :meth:`delay_ms` rounds)."""
        return round(self.due_ms)


def make_item(id: str, due_ms: float) -> Item:
    """An :class:`Item` with its body."""
    return Item(id, due_ms, orjson.dumps({"id": id, "due": due_ms, "pad": PAD}).decode())


def items(count: int, delay_ms: float = 0.0, prefix: str = "m") -> list[Item]:
    """``count`` items all due ``delay_ms`` from now (ids ``prefix0``, ``prefix1``, ...)."""
    due = time.time() * 1000 + delay_ms
    return [make_item(f"{prefix}{i}", due) for i in range(count)]


def due_of(body: str | bytes) -> float:
    """The due time (epoch ms) stored in a body made by :meth:`Item.body`."""
    return float(orjson.loads(body)["due"])


def now_ms() -> float:
    """Wall-clock now in epoch milliseconds (float)."""
    return time.time() * 1000


# ------------------------------------------------------------------------------------ statistics


def summary(values: Sequence[float]) -> dict[str, float]:
    """Median, min and max of repeated measurements.

    Returns:
        ``{"median": m, "min": lo, "max": hi, "runs": n}``; NaN figures for an empty input.
    """
    if not values:
        nan = float("nan")
        return {"median": nan, "min": nan, "max": nan, "runs": 0}
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "runs": len(values)}


def percentiles(samples: Sequence[float]) -> dict[str, float]:
    """p50, p99, max and min of lateness samples (ms), plus the count.

    Returns:
        ``{"p50": .., "p99": .., "max": .., "min": .., "count": n}``; NaN when empty.
    """
    if not samples:
        nan = float("nan")
        return {"p50": nan, "p99": nan, "max": nan, "min": nan, "count": 0}
    ordered = sorted(samples)

    def pick(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {"p50": pick(0.50), "p99": pick(0.99), "max": ordered[-1], "min": ordered[0],
            "count": len(ordered)}


# ------------------------------------------------------------------------------ Redis statistics

#: commandstats entries that are the harness's own bookkeeping, never a library's cost.
_HARNESS_COMMANDS = {"info", "config|resetstat", "config", "flushall", "ping"}


def reset_stats(admin: Any) -> None:
    """``CONFIG RESETSTAT`` on the server behind the ``admin`` redis-py client."""
    admin.config_resetstat()


def command_stats(admin: Any) -> dict[str, int]:
    """Calls per command since the last reset (``INFO commandstats``), harness commands left out.

    Commands a Lua script runs are counted under their own names (Redis 7 does), and the
    script call itself under ``evalsha``/``eval``.

    Returns:
        ``{"hset": 1000, "evalsha": 2, ...}`` (lower-case command names).
    """
    out: dict[str, int] = {}
    for key, value in admin.info("commandstats").items():
        name = key.removeprefix("cmdstat_").lower()
        if name in _HARNESS_COMMANDS or name.startswith("config|"):
            continue
        out[name] = int(value["calls"])
    return out


def reads_processed(admin: Any) -> int:
    """``total_reads_processed`` of ``INFO stats``: socket reads of client requests so far."""
    return int(admin.info("stats").get("total_reads_processed", 0))


def used_memory(admin: Any) -> int:
    """``used_memory`` of ``INFO memory``, in bytes."""
    return int(admin.info("memory")["used_memory"])


# -------------------------------------------------------------------------------- round trips


class RoundTrips:
    """Counts requests that redis-py sends (sync and asyncio): one per command or pipeline.

    ``install()`` wraps ``send_packed_command`` of redis-py's sync and asyncio connections,
    which every command, pipeline and script call goes through (and dynoqueue.asyncio's batch
    writes, which bypass it), so the count is the number of request/response round trips this
    process made, whatever library issued them.
    """

    count = 0
    _lock = threading.Lock()
    _installed = False

    @classmethod
    def install(cls) -> None:
        """Start counting in this process (idempotent)."""
        if cls._installed:
            return
        import redis.asyncio.connection as aconn
        import redis.connection as sconn

        sync_send = sconn.AbstractConnection.send_packed_command
        async_send = aconn.AbstractConnection.send_packed_command

        def counted_sync(self: Any, command: Any, check_health: bool = True) -> Any:
            cls.count += 1
            return sync_send(self, command, check_health)

        async def counted_async(self: Any, command: Any, check_health: bool = True) -> Any:
            cls.count += 1
            return await async_send(self, command, check_health)

        sconn.AbstractConnection.send_packed_command = counted_sync  # type: ignore[method-assign]
        aconn.AbstractConnection.send_packed_command = counted_async  # type: ignore[method-assign]
        # dynoqueue.asyncio's auto-pipelining writes a batch on a connected socket itself
        # (dynoqueue.io.batching.write_batch), not send_packed_command: count those writes too.
        try:
            from dynoqueue.io import batching
        except ImportError:
            batching = None  # type: ignore[assignment]
        if batching is not None and hasattr(batching, "write_batch"):
            batch_send = batching.write_batch

            async def counted_batch(conn: Any, packed: bytes) -> None:
                writer = getattr(conn, "_writer", None)
                if writer is not None and conn.is_connected and not writer.transport.is_closing():
                    # (else write_batch falls back to send_packed_command, counted above)
                    cls.count += 1
                await batch_send(conn, packed)

            batching.write_batch = counted_batch
        cls._installed = True

    @classmethod
    def reset(cls) -> int:
        """Set the count to 0 and return what it was."""
        before, cls.count = cls.count, 0
        return before
