"""Queue-level calls: :class:`Call`, the one request of every operation driven call by call.

The package's sans-IO generators speak two vocabularies, one per level:

* Redis level, :mod:`dynoqueue.core.requests` (``Command``, ``Pipeline``, ``Scan``, ...): what
  the queue's own operations yield; the io drivers answer them with redis-py, under the call's
  deadline, retries and Cluster routing.
* Queue level, here: a :class:`Call` names a method of an object above the drivers (a queue of
  either API, a factory's client) and its arguments. The Conductor DAO's operations
  (:mod:`dynoqueue.conductor.core`: methods of the factory's queues), the queue listing
  (:mod:`dynoqueue.core.listing`: a SCAN on each Cluster primary, which the requests cannot
  route) and the Worker's programs (:mod:`dynoqueue.worker.engine`: methods of the worker's
  queue, a :class:`Call` without a target that the driver makes on its queue) yield them.

A call-driven operation yields calls and receives their results; the error a call raises is
thrown into the operation at its ``yield``, which may turn it into a typed error. With the
asyncio API the method is a coroutine function, whose result the driver awaits.
:func:`outcome` makes a call (sync API), :func:`outcome_async` awaits it; :func:`run` and
:func:`run_async` drive a whole operation with them.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, TypeVar

from .requests import Step

T = TypeVar("T")


class Call:
    """``target.<method>(*args, **kwargs)``: a call of a method, by name.

    ``Call(method, ...)`` leaves the target to the driver (a Worker's programs: the worker's
    queue); ``Call.of(target, method, ...)`` names it (a queue, a redis-py client).
    """

    __slots__ = ("args", "kwargs", "method", "target")

    def __init__(self, method: str, *args: Any, **kwargs: Any) -> None:
        self.target: Any = None
        self.method = method
        self.args = args
        self.kwargs = kwargs

    @classmethod
    def of(cls, target: Any, method: str, *args: Any, **kwargs: Any) -> Call:
        """The call of ``target``'s ``method`` with these arguments."""
        call = cls(method, *args, **kwargs)
        call.target = target
        return call

    def make(self, target: Any = None) -> Any:
        """Make the call on its own target, else on ``target`` (a coroutine with the asyncio
        API); its errors propagate."""
        on = self.target if self.target is not None else target
        return getattr(on, self.method)(*self.args, **self.kwargs)


#: A call-driven operation: yields calls, receives their results, returns its result.
CallOp = Generator[Call, Any, T]


def outcome(call: Call, target: Any = None) -> tuple[Any, Exception | None]:
    """Make the call (see :meth:`Call.make`): ``(result, None)``, or ``(None, error)`` for the
    operation to handle."""
    try:
        return call.make(target), None
    except Exception as exc:
        return None, exc


async def outcome_async(call: Call, target: Any = None) -> tuple[Any, Exception | None]:
    """Await the call (cancellation is not caught: it ends the operation)."""
    try:
        return await call.make(target), None
    except Exception as exc:
        return None, exc


def run(op: CallOp[T], target: Any = None) -> T:
    """Drive ``op`` to its end, making its calls (on ``target`` when a call names none), and
    return its result (or raise its error)."""
    step = Step(op)
    while step.pending:
        step.send(*outcome(step.request, target))
    return step.result  # type: ignore[no-any-return]


async def run_async(op: CallOp[T], target: Any = None) -> T:
    """:func:`run`, awaiting each call."""
    step = Step(op)
    while step.pending:
        step.send(*(await outcome_async(step.request, target)))
    return step.result  # type: ignore[no-any-return]
