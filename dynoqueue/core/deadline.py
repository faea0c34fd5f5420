"""The deadline of the call in progress: one per call, read wherever it must be respected.

A driver opens a :class:`Deadline` when it starts running an operation (``call_timeout_ms``
from now; a waiting pop adds its wait with a :class:`~dynoqueue.core.requests.Budget`
request) and puts it in :data:`CURRENT`, a context variable: the sync driver's thread and the
asyncio driver's tasks (which copy the context) see it. The retry budget of the connections
(:mod:`dynoqueue.connect.clients`) reads it at every level where redis-py retries (the
command, ``connect()``, the health-check ping inside it), so nested retries share one deadline
instead of multiplying; a driver refuses to send a request once it has passed.
"""

from __future__ import annotations

import time
from contextvars import ContextVar


class Deadline:
    """A point in time (``time.monotonic()`` seconds) by which a call must end.

    Args:
        seconds: from now, > 0.
    """

    __slots__ = ("at", "refused_since", "warned")

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds
        #: A retry of this call was logged as a warning (the others go to debug).
        self.warned = False
        #: ``time.monotonic()`` of this call's first refused (or unresolvable) connection.
        self.refused_since: float | None = None

    def left(self) -> float:
        """Seconds until the deadline (negative once it has passed)."""
        return self.at - time.monotonic()

    def renew(self, seconds: float) -> None:
        """Move the deadline to ``seconds`` from now."""
        self.at = time.monotonic() + seconds


class DeadlinePassed(Exception):
    """Thrown by a driver into an operation whose deadline passed before its next request
    (or while the asyncio driver awaited a reply); the core turns it into
    :class:`~dynoqueue.errors.CallTimeoutError`."""


#: The deadline of the call running in this thread or task (None outside any call).
CURRENT: ContextVar[Deadline | None] = ContextVar("dynoqueue_deadline", default=None)
#: False while a command that must not run twice is sent (a claim): a read timeout leaves its
#: outcome unknown, so the connection's retry does not repeat it.
RETRY_TIMEOUTS: ContextVar[bool] = ContextVar("dynoqueue_retry_timeouts", default=True)


def seconds_left(cap: float) -> float:
    """The current call's seconds left, at most ``cap`` and at least 0 (``cap`` when no call
    is in progress)."""
    deadline = CURRENT.get()
    return cap if deadline is None else max(0.0, min(cap, deadline.left()))
