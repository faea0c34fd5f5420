"""What the Worker's programs yield, and how a driver advances them.

A worker is made of programs (generators, :mod:`dynoqueue.worker.engine`) that yield three
kinds of requests:

* a queue-level :class:`~dynoqueue.core.calls.Call` without a target: a method of the
  worker's queue (``ack_many``, ``nack``, ``set_unack_timeout_many``, ...), which the driver
  makes on its queue (the asyncio driver awaits it); the reply is its result, or its
  exception is thrown into the program. :class:`Pop`, the claim, is such a call;
* :class:`Wait`: wait until the engine wakes a role, or a timeout;
* :class:`Handle`: run the handler on a message.

The drivers (threads in :mod:`dynoqueue.worker.threads`, asyncio tasks in
:mod:`dynoqueue.worker.tasks`) advance each program with :class:`dynoqueue.core.requests.Step`:
``while step.pending: step.send(*answer(step.request))``.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from ..core.calls import Call
from ..model.message import Message

#: The roles a program waits as; a driver keeps one wake-up per role.
ROLES = ("claimer", "slots", "finisher", "stop")


class Pop(Call):
    """The claim: ``queue.pop(count, wait_ms, lease_ms=..., min_count=1)``, which returns as
    soon as anything is leased. The asyncio driver cancels it when the worker stops (the queue
    then puts back what it leased); the thread driver bounds its wait instead."""

    __slots__ = ()

    def __init__(self, count: int, wait_ms: int, lease_ms: int | None) -> None:
        super().__init__("pop", count, wait_ms, lease_ms=lease_ms, min_count=1)


class Wait:
    """Wait until the engine wakes ``role`` (its epoch moves past ``epoch``) or ``timeout_s``
    passes; the reply is ignored."""

    __slots__ = ("epoch", "role", "timeout_s")

    def __init__(self, role: str, epoch: int, timeout_s: float) -> None:
        self.role = role
        self.epoch = epoch
        self.timeout_s = timeout_s


class Handle:
    """Run the handler on ``message``; the reply is what it raised, or None. Never thrown."""

    __slots__ = ("message",)

    def __init__(self, message: Message) -> None:
        self.message = message


#: A program of the worker: yields its requests, returns nothing.
Program = Generator[Call | Wait | Handle, Any, None]
