"""The one request of a call-driven operation, a :class:`Call`, and how each API makes it.

Besides the queue's operations, which yield the requests of :mod:`dynoqueue.core.requests`
and are run by the drivers, a few operations are driven call by call: the Conductor DAO's
(:mod:`dynoqueue.conductor.core`, whose calls are methods of a queue), the queue listing
(:mod:`dynoqueue.core.listing`: a SCAN on each Cluster primary, which the requests cannot
route) and the metrics' read (:mod:`dynoqueue.metrics.stats`). Such an operation yields calls
and receives their results; the error a call raises is thrown into the operation at its
``yield``, which may turn it into a typed error. :func:`outcome` makes a call (sync API),
:func:`outcome_async` awaits it.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, TypeVar

T = TypeVar("T")


class Call:
    """``fn(*args, **kwargs)``: a method of a queue, or of a redis-py client; with the asyncio
    API a coroutine function, whose result the driver awaits."""

    __slots__ = ("args", "fn", "kwargs")

    def __init__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self.fn = fn
        self.args = args
        self.kwargs = kwargs


#: A call-driven operation: yields calls, receives their results, returns its result.
DaoOp = Generator[Call, Any, T]


def outcome(call: Call) -> tuple[Any, Exception | None]:
    """Make the call: ``(result, None)``, or ``(None, error)`` for the operation to handle."""
    try:
        return call.fn(*call.args, **call.kwargs), None
    except Exception as exc:
        return None, exc


async def outcome_async(call: Call) -> tuple[Any, Exception | None]:
    """Await the call (cancellation is not caught: it ends the operation)."""
    try:
        return await call.fn(*call.args, **call.kwargs), None
    except Exception as exc:
        return None, exc
