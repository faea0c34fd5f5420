"""What a handler's end means for its message: ack, nack after a delay, or dead letter.

A handler that returns acks its message. One that raises :class:`Retry` asks for a delivery again
after a delay; one that raises :class:`DeadLetterNow` dead-letters its message at once; any other
exception nacks it with the :class:`Backoff` delay for its delivery count (and at the queue's
``max_deliveries`` the nack dead-letters it). :func:`decide` turns a handler's end into a
:class:`Decision`; it does no I/O, so both Workers share it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from ..errors import InvalidArgumentError
from ..model.message import Message
from ..model.validate import is_int, ms

#: Longest text kept of a handler's error; the queue keeps up to 4096 characters.
MAX_ERROR_CHARS = 4096
#: Longest dead-letter reason the queue keeps.
MAX_REASON_CHARS = 200


class Retry(Exception):
    """Raise from a handler to have its message delivered again after ``delay_ms``.

    The lease ends at once (a nack with that delay), and the delivery counts: at the queue's
    ``max_deliveries`` the message is dead-lettered instead. Use it to postpone work that cannot
    be done yet (SQS ChangeMessageVisibility, RMQ's reconsume later).

    Args:
        delay_ms: ms until the message is due again, >= 0.
        reason: recorded as the message's last error (None records nothing).

    Raises:
        InvalidArgumentError: delay_ms is not an int >= 0, or reason is not a str or None.
    """

    def __init__(self, delay_ms: int, reason: str | None = None) -> None:
        ms("delay_ms", delay_ms)
        if reason is not None and not isinstance(reason, str):
            raise InvalidArgumentError(f"reason must be a str or None, got {reason!r:.80}")
        super().__init__(delay_ms, reason)
        self.delay_ms = delay_ms
        self.reason = reason

    def __str__(self) -> str:
        return f"retry in {self.delay_ms} ms" + (f": {self.reason}" if self.reason else "")


class DeadLetterNow(Exception):
    """Raise from a handler to dead-letter its message at once, whatever its delivery count
    (the queue's ``dead_letter``): for messages that can never succeed.

    Args:
        reason: recorded as the dead letter's reason (its first 200 characters), e.g.
            ``"cancelled"``; a non-empty str.

    Raises:
        InvalidArgumentError: reason is not a non-empty str.
    """

    def __init__(self, reason: str) -> None:
        if not isinstance(reason, str) or not reason:
            raise InvalidArgumentError(f"reason must be a non-empty str, got {reason!r:.80}")
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Backoff:
    """The delay before a failed message is due again: ``initial_ms * factor ** (n - 1)`` for
    its n-th delivery, at most ``max_ms``, spread by +-``jitter`` (a fraction) so that messages
    that failed together do not come back together.

    Args:
        initial_ms: the delay after the first delivery failed, ms, >= 0.
        factor: growth per delivery, >= 1.0 (1.0: a constant delay).
        max_ms: the longest delay, ms, >= initial_ms.
        jitter: 0.0 .. 1.0; 0.1 spreads each delay over +-10 %.

    Raises:
        InvalidArgumentError: (a ValueError) a value out of range.
    """

    initial_ms: int = 1_000
    factor: float = 2.0
    max_ms: int = 300_000
    jitter: float = 0.1

    def __post_init__(self) -> None:
        ms("initial_ms", self.initial_ms)
        ms("max_ms", self.max_ms, low=self.initial_ms if is_int(self.initial_ms) else 0)
        for name, low, high in (("factor", 1.0, math.inf), ("jitter", 0.0, 1.0)):
            value = getattr(self, name)
            if (not isinstance(value, (int, float)) or isinstance(value, bool)
                    or not low <= value <= high or math.isinf(value)):
                raise InvalidArgumentError(
                    f"{name} must be a finite number in {low:g}..{high:g}, got {value!r}")

    def delay_ms(self, deliveries: int, rand: float = 0.5) -> int:
        """The delay after the ``deliveries``-th delivery failed.

        Args:
            deliveries: the message's delivery count, >= 1 (0 is taken as 1).
            rand: a number in [0, 1) that places the delay in its jitter range (0.5: the middle).

        Returns:
            The delay in ms, 0 .. max_ms.
        """
        try:
            base = min(float(self.max_ms), self.initial_ms * self.factor ** max(deliveries - 1, 0))
        except OverflowError:
            base = float(self.max_ms)
        spread = base * self.jitter * (2.0 * rand - 1.0)
        return max(0, min(self.max_ms, round(base + spread)))


@dataclass(frozen=True)
class Decision:
    """What to send for a message whose handler ended.

    Attributes:
        action: "ack", "nack" (due again after ``delay_ms``) or "dead_letter".
        delay_ms: for a nack, ms until it is due again.
        error: the text to record as its last error (None: nothing).
        reason: for a dead letter, its reason.
        asked: the handler asked for it (Retry, DeadLetterNow) rather than failed.
    """

    action: Literal["ack", "nack", "dead_letter"]
    delay_ms: int = 0
    error: str | None = None
    reason: str = ""
    asked: bool = False


ACK = Decision("ack")


def decide(message: Message, error: BaseException | None, backoff: Backoff,
           rand: float = 0.5) -> Decision:
    """What a handler's end means for its message.

    Args:
        message: the message (its ``deliveries`` picks the backoff step).
        error: what the handler raised, or None if it returned.
        backoff: the delays of failed messages.
        rand: a number in [0, 1) for the backoff's jitter.

    Returns:
        ACK when the handler returned; a nack with Retry's delay; a dead letter for
        DeadLetterNow; otherwise a nack with the backoff delay and the error's text.
    """
    if error is None:
        return ACK
    if isinstance(error, Retry):
        return Decision("nack", error.delay_ms, error.reason, asked=True)
    if isinstance(error, DeadLetterNow):
        return Decision("dead_letter", reason=error.reason[:MAX_REASON_CHARS], asked=True)
    return Decision("nack", backoff.delay_ms(message.deliveries, rand), describe(error))


def describe(error: BaseException) -> str:
    """One line naming an exception: ``"TimeoutError: gateway did not answer"``."""
    text = " ".join(str(error).split())
    name = type(error).__name__
    return (f"{name}: {text}" if text else name)[:MAX_ERROR_CHARS]
