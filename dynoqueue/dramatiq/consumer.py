"""The consumer side of :class:`~dynoqueue.dramatiq.DynoqueueBroker`: leases, heartbeats, ack,
dead letters and requeue, mapped onto one dynoqueue queue.

Dramatiq's worker runs one consumer thread per queue that iterates a :class:`Consumer`, and
worker threads that call its ``ack``/``nack`` when a message is done. Every message the
consumer hands out is a dynoqueue lease; :class:`Leases` keeps the leases the process holds
for one queue (shared by every consumer of that queue, so a consumer restarted after a Redis
error still extends and ends the leases of the one before) and extends them from the consumer
thread, each time the worker asks for the next message, once a third of the lease has passed
(and a :class:`Heartbeat` thread does when the consumer threads do not: a paused worker).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import dramatiq
from dramatiq.broker import MessageProxy
from dramatiq.errors import ConnectionClosed, DecodeError

from ..errors import AccessDeniedError, RedisOperationError
from ..model.message import Message
from ..queue import DynoQueue
from .codec import to_dramatiq

log = logging.getLogger("dynoqueue.dramatiq")

T = TypeVar("T")

#: Most characters of a dead letter's reason and of the error text recorded with it.
MAX_REASON_CHARS = 200
MAX_ERROR_CHARS = 4000


def redis_call(what: str, call: Callable[[], T]) -> T:
    """Run a queue call; a Redis failure becomes dramatiq's ``ConnectionClosed`` (the worker
    restarts its consumer, or retries an ack, on that). Access errors stay what they are: no
    retry cures them."""
    try:
        return call()
    except AccessDeniedError:
        raise
    except RedisOperationError as exc:
        raise ConnectionClosed(f"{what}: {exc}") from exc  # type: ignore[no-untyped-call]


class DynoMessageProxy(MessageProxy):
    """A dramatiq message handed to the worker, with the dynoqueue lease it came with.

    Attributes:
        delivery: the popped :class:`dynoqueue.Message` (its ``receipt`` names this lease,
            ``deliveries`` counts its deliveries, 1 on the first).
    """

    def __init__(self, message: dramatiq.Message[Any], delivery: Message) -> None:
        super().__init__(message)
        self.delivery = delivery


class Leases:
    """The leases one process holds on one queue's messages, and their heartbeat.

    Args:
        queue: the dynoqueue queue.
        lease_ms: the lease each pop takes and each heartbeat renews, ms.

    Thread-safe: the consumer thread adds and beats, worker threads drop.
    """

    def __init__(self, queue: DynoQueue, lease_ms: int) -> None:
        self.queue = queue
        self.lease_ms = lease_ms
        self.beat_every_s = lease_ms / 3000
        self._held: dict[str, Message] = {}
        self._changed = threading.Condition()
        self._next_beat = time.monotonic() + self.beat_every_s

    def count(self) -> int:
        """How many leases are held."""
        with self._changed:
            return len(self._held)

    def add(self, delivery: Message) -> None:
        """Hold ``delivery``'s lease (keep extending it) until :meth:`drop`."""
        with self._changed:
            self._held[delivery.receipt or delivery.id] = delivery

    def drop(self, deliveries: Iterable[Message]) -> None:
        """Stop holding these leases (acked, dead-lettered or given back)."""
        with self._changed:
            for delivery in deliveries:
                self._held.pop(delivery.receipt or delivery.id, None)
            self._changed.notify_all()

    def wait_for_room(self, limit: int, timeout_s: float) -> bool:
        """Wait until fewer than ``limit`` leases are held, at most ``timeout_s`` seconds.

        Returns:
            True if there is room.
        """
        with self._changed:
            return self._changed.wait_for(lambda: len(self._held) < limit, timeout_s)

    def beat_if_due(self) -> None:
        """Extend every held lease to ``lease_ms`` from now, once a third of a lease has passed
        since the last heartbeat (one round trip per partition). A Redis failure is logged:
        the next call tries again; a lease that runs out meanwhile is delivered again."""
        now = time.monotonic()
        with self._changed:
            if now < self._next_beat:
                return
            self._next_beat = now + self.beat_every_s
            held = list(self._held.values())
        if not held:
            return
        try:
            renewed = self.queue.set_unack_timeout_many(held, self.lease_ms)
        except RedisOperationError:
            log.warning("queue %s: extending %d leases failed", self.queue.name, len(held),
                        exc_info=True)
            return
        if renewed < len(held):
            log.debug("queue %s: %d of %d leases were no longer held", self.queue.name,
                      len(held) - renewed, len(held))


class Heartbeat(threading.Thread):
    """Renews the held leases of every queue when the consumer threads do not (a paused
    Worker, a consumer thread busy elsewhere): wakes every ``interval_s`` and beats the
    leases that are due (:meth:`Leases.beat_if_due`), until :meth:`stop`.

    Args:
        leases: returns the :class:`Leases` of every declared queue.
        interval_s: how often it wakes, seconds.
    """

    def __init__(self, leases: Callable[[], Iterable[Leases]], interval_s: float) -> None:
        super().__init__(name="dynoqueue-dramatiq-heartbeat", daemon=True)
        self._leases = leases
        self._interval_s = interval_s
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self._interval_s):
            for leases in self._leases():
                try:
                    leases.beat_if_due()
                except Exception:  # the thread must survive anything
                    log.exception("queue %s: heartbeat failed", leases.queue.name)

    def stop(self, timeout_s: float) -> None:
        """Stop and join, at most ``timeout_s`` seconds."""
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout_s)


class Consumer(dramatiq.Consumer):
    """Iterates the due messages of one dynoqueue queue for dramatiq's worker.

    Args:
        leases: the process's leases of the queue (shared by its consumers).
        prefetch: most messages leased and not yet done at once (handed out or buffered).
        timeout_ms: the longest a ``next()`` waits for a message before returning None.

    Mirrors dramatiq's ``Consumer``: ``ack`` acks the lease, ``nack`` dead-letters it,
    ``requeue`` gives leases back (``release``: due at once, delivery not counted).
    """

    def __init__(self, leases: Leases, prefetch: int, timeout_ms: int) -> None:
        self.leases = leases
        self.queue = leases.queue
        self.prefetch = max(1, prefetch)
        # A waiting pop holds no heartbeat: keep each wait within a heartbeat period.
        self.wait_ms = max(1, min(timeout_ms, int(leases.beat_every_s * 1000)))
        self.buffer: collections.deque[Message] = collections.deque()

    def __next__(self) -> DynoMessageProxy | None:
        """The next due message, leased for this process; None if none came within the
        timeout. Extends the held leases first when a heartbeat is due.

        Raises:
            dramatiq.errors.ConnectionClosed: Redis failed (the worker restarts the consumer).
        """
        self.leases.beat_if_due()
        while True:
            if not self.buffer:
                self._fill()
                if not self.buffer:
                    return None
            delivery = self.buffer.popleft()
            proxy = self._decoded(delivery)
            if proxy is not None:
                return proxy

    def _fill(self) -> None:
        room = self.prefetch - self.leases.count()  # buffered ones are held too
        if room <= 0:
            self.leases.wait_for_room(self.prefetch, self.wait_ms / 1000)
            return
        popped = redis_call("pop", lambda: self.queue.pop(
            room, self.wait_ms, lease_ms=self.leases.lease_ms, min_count=1))
        for delivery in popped:
            self.leases.add(delivery)
        self.buffer.extend(popped)

    def _decoded(self, delivery: Message) -> DynoMessageProxy | None:
        """The proxy for ``delivery``, or None after dead-lettering it as undecodable."""
        try:
            return DynoMessageProxy(to_dramatiq(delivery), delivery)
        except DecodeError as exc:
            error = _clip(repr(exc.error), MAX_ERROR_CHARS)
        log.error("queue %s: message %s is not a dramatiq message; dead-lettered",
                  self.queue.name, delivery.id)
        self._end(delivery, lambda: self.queue.dead_letter(
            delivery.id, "undecodable", error=error, receipt=delivery.receipt))
        return None

    def ack(self, message: MessageProxy) -> None:
        """Ack the message's lease: it leaves the queue. A lease that ended meanwhile (the
        message was enqueued again, e.g. retried, or delivered again after its lease) is
        left alone.

        Raises:
            dramatiq.errors.ConnectionClosed: Redis failed (the worker retries).
        """
        delivery = _delivery(message)
        if delivery is not None and not self._end(delivery, lambda: self.queue.ack(
                delivery.id, receipt=delivery.receipt)):
            log.debug("queue %s: message %s was no longer leased at its ack",
                      self.queue.name, delivery.id)

    def nack(self, message: MessageProxy) -> None:
        """Dead-letter the message (dramatiq rejected it: retries exhausted, ``throws``, age
        limit, unknown actor): reason ``dramatiq: <exception class>``, last error the exception
        (``LookupError: no such user``) and the traceback the Retries middleware recorded.
        It shows in ``dynoqueue dead`` and can be redriven.

        Raises:
            dramatiq.errors.ConnectionClosed: Redis failed (the worker retries).
        """
        delivery = _delivery(message)
        if delivery is None:
            return
        exc = getattr(message, "_exception", None)
        reason = _clip(f"dramatiq: {type(exc).__name__}" if exc is not None
                       else "dramatiq: rejected", MAX_REASON_CHARS)
        error = _error_text(exc, message.options.get("traceback"))
        if not self._end(delivery, lambda: self.queue.dead_letter(
                delivery.id, reason, error=error, receipt=delivery.receipt)):
            log.warning("queue %s: message %s was no longer leased when it was rejected",
                        self.queue.name, delivery.id)

    def requeue(self, messages: Iterable[MessageProxy]) -> None:
        """Give back leases of messages the worker never processed (prefetched when it shut
        down): each is due again at once and this delivery is not counted.

        Raises:
            dramatiq.errors.ConnectionClosed: Redis failed (they come back once their leases
                expire).
        """
        self._release([d for d in map(_delivery, messages) if d is not None])

    def close(self) -> None:
        """Give back the leases popped but not handed to the worker yet."""
        buffered, self.buffer = list(self.buffer), collections.deque()
        try:
            self._release(buffered)
        except ConnectionClosed:
            log.warning("queue %s: giving back %d leases failed; they come back after their "
                        "leases", self.queue.name, len(buffered))

    def _release(self, deliveries: list[Message]) -> None:
        if deliveries:
            self._end_many(deliveries, lambda: self.queue.release(deliveries))

    def _end(self, delivery: Message, call: Callable[[], bool]) -> bool:
        return bool(self._end_many([delivery], call))

    def _end_many(self, deliveries: list[Message], call: Callable[[], T]) -> T:
        try:
            return redis_call("end lease", call)
        finally:
            self.leases.drop(deliveries)


def _delivery(message: MessageProxy) -> Message | None:
    return message.delivery if isinstance(message, DynoMessageProxy) else None


def _error_text(exc: BaseException | None, traceback: Any) -> str | None:
    """The exception first, then as much of the end of the traceback as fits."""
    if exc is None and not traceback:
        return None
    summary = _clip(f"{type(exc).__name__}: {exc}" if exc is not None else "", 500)
    if not traceback:
        return summary
    room = MAX_ERROR_CHARS - len(summary) - 2
    return f"{summary}\n\n{_clip(str(traceback), room, tail=True)}".lstrip()


def _clip(text: str, most: int, *, tail: bool = False) -> str:
    if len(text) <= most:
        return text
    return "..." + text[-(most - 3):] if tail else text[:most - 3] + "..."
