"""Connections that try several node addresses in turn (the Dynomite profile's node list).

Each new connection tries the addresses in order and keeps the first that accepts it: the local
zone's node while it is up, else the next one. A connection that fails later reconnects the same
way, so clients fall back to the first address as soon as it is back.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import redis.asyncio.connection
import redis.connection

from ..core.deadline import CURRENT


def _in_turn(conn: Any) -> Iterator[None]:
    """Point ``conn`` at each of its addresses in turn (for its ``_connect`` to try), until
    the call's deadline passes (each try may wait the connect timeout)."""
    deadline = CURRENT.get()
    for i, (host, port) in enumerate(conn.addresses):
        if i and deadline is not None and deadline.left() <= 0:
            return
        conn.host, conn.port = host, port
        yield


def _addresses(conn: Any, addresses: Sequence[tuple[str, int]]) -> None:
    conn.addresses = [(str(h), int(p)) for h, p in addresses] or [(conn.host, conn.port)]


class FailoverConnection(redis.connection.Connection):
    """A redis-py connection over the first of ``addresses`` that accepts it.

    Args:
        addresses: ``[(host, port), ...]`` in order of preference (default: host and port).
        **kwargs: as :class:`redis.connection.Connection`.
    """

    def __init__(self, *, addresses: Sequence[tuple[str, int]] = (), **kwargs: Any) -> None:
        super().__init__(**kwargs)  # type: ignore[no-untyped-call]
        _addresses(self, addresses)

    def _connect(self) -> Any:
        error: OSError = ConnectionRefusedError("no address")
        for _ in _in_turn(self):
            try:
                return super()._connect()  # type: ignore[no-untyped-call]
            except OSError as exc:  # refused, unreachable, timed out: the next one
                error = exc
        raise error


class AsyncFailoverConnection(redis.asyncio.connection.Connection):
    """:class:`FailoverConnection` for redis.asyncio."""

    def __init__(self, *, addresses: Sequence[tuple[str, int]] = (), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _addresses(self, addresses)

    async def _connect(self) -> None:
        error: OSError = ConnectionRefusedError("no address")
        for _ in _in_turn(self):
            try:
                await super()._connect()  # type: ignore[no-untyped-call]
                return
            except OSError as exc:
                error = exc
        raise error
