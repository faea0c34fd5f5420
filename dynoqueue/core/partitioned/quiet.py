"""What the last round of a partitioned pop that found nothing due tells the waiting pop that
follows it: a consumer's ``pop(n) or pop(1, wait_ms=...)`` asks every partition once, not twice.

A partitioned queue's round asks each partition (one ``due.lua`` call per partition, a round
trip per node): on a 12-partition queue a consumer that alternates a pop that does not wait and
one that does paid two such rounds per message, and its lateness showed it.
"""

from __future__ import annotations

import math
import time

#: How long the answer of a round that found nothing due stands in for a waiting pop's first
#: round, s: no longer than a waiting pop would have slept on it had it started then.
QUIET_REUSE_S = 0.05


class Quiet:
    """A round over every partition that leased nothing: the ring count of its channels taken
    before it, when it began (monotonic s) and when its first waiting message falls due. Until
    a ring on those channels (the doorbell wakes a waiting pop for anything pushed, nacked or
    released since), nothing of the queue is due before then, as a pop that had waited since
    that round would know."""

    __slots__ = ("began", "channels", "due_at", "ticket")

    def __init__(self, ticket: int, channels: tuple[int, ...], began: float,
                 next_due_ms: int | None) -> None:
        self.ticket = ticket
        self.channels = channels
        self.began = began
        # From the round's end, as a pop that slept on the answer would count (never early).
        self.due_at = None if next_due_ms is None else time.monotonic() + next_due_ms / 1000

    def holds(self, ticket: int, channels: tuple[int, ...]) -> bool:
        return (ticket == self.ticket and channels == self.channels
                and time.monotonic() - self.began < QUIET_REUSE_S)

    def due_in_ms(self) -> int | None:
        """ms until the first waiting message is due (<= 0: due; None: none waits)."""
        if self.due_at is None:
            return None
        return math.ceil((self.due_at - time.monotonic()) * 1000)
