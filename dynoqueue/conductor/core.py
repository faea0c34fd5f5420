"""The DAO's logic, written once for both APIs: argument checks, seconds to milliseconds, the
dynoqueue calls, and the shaping of their results.

Each operation is a generator, in the manner of :mod:`dynoqueue.core`: it checks and converts
its arguments, yields a queue-level :class:`~dynoqueue.core.calls.Call` for each queue call
(listing the queues: each client call), receives the call's result (or its error, thrown in at
the ``yield``), and returns the DAO's result.
:class:`~dynoqueue.conductor.DynoQueueDAO` makes the calls, :class:`AsyncDynoQueueDAO` awaits
them; that is all that differs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..core.calls import Call, CallOp
from ..core.listing import queue_names
from ..errors import (
    ConfigurationError,
    InvalidArgumentError,
    InvalidMessageError,
    RedisOperationError,
)
from ..model.message import Message
from ..model.validate import int_at_least, message_id

#: How often postpone tries again when the id appears or vanishes between its two atomic steps.
POSTPONE_ATTEMPTS = 5


def seconds(name: str, value: object) -> int:
    """``value`` seconds (an int >= 0, as Conductor's offsets) in milliseconds."""
    return int_at_least(name, value, 0, unit="s") * 1000


def milliseconds(name: str, value: object) -> int:
    """``value`` (an int >= 0) as given: it is already milliseconds."""
    return int_at_least(name, value, 0, unit="ms")


def priority(value: object) -> int:
    """A priority: an int in 0..99 (Conductor silently ignored others; here they raise)."""
    if int_at_least("priority", value, 0) > 99:
        raise InvalidArgumentError(f"priority must be an int in 0..99, got {value!r}")
    return value  # type: ignore[return-value]


def flag(name: str, value: object) -> bool:
    """A switch: a bool (a truthy string is no answer)."""
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{name} must be a bool, got {value!r}")
    return value


class DaoCore:
    """The operations of the QueueDAO on one factory (sync or asyncio: the calls it yields are
    the factory's queue methods, plain or coroutine).

    Args:
        queues: a :class:`dynoqueue.RedisQueues` or :class:`dynoqueue.asyncio.RedisQueues`.
    """

    def __init__(self, queues: Any) -> None:
        self.queues = queues

    def _call(self, queue_name: str, method: str, *args: Any, **kwargs: Any) -> Call:
        return Call.of(self.queues.get(queue_name), method, *args, **kwargs)

    @staticmethod
    def _message(id: str, delay_s: int, prio: int, delay_name: str = "offset_time_s") -> Message:
        return Message(message_id(id), None, seconds(delay_name, delay_s), priority(prio))

    def push(self, queue_name: str, id: str, offset_time_s: int, prio: int) -> CallOp[None]:
        message = self._message(id, offset_time_s, prio)
        yield self._call(queue_name, "push", [message])

    def push_messages(self, queue_name: str, messages: Iterable[Message]) -> CallOp[None]:
        if isinstance(messages, Message | str) or not isinstance(messages, Iterable):
            raise InvalidMessageError(f"messages must be an iterable of Message, got "
                                      f"{type(messages).__name__}")
        yield self._call(queue_name, "push", list(messages))

    def push_if_not_exists(self, queue_name: str, id: str, offset_time_s: int,
                           prio: int) -> CallOp[bool]:
        message = self._message(id, offset_time_s, prio)
        return bool((yield self._call(queue_name, "ensure", message)))

    def poll_messages(self, queue_name: str, count: int, timeout_ms: int) -> CallOp[list[Message]]:
        int_at_least("count", count, 0)
        wait_ms = milliseconds("timeout_ms", timeout_ms)
        # min_count=1: a workflow engine's poll must not hold due work back to fill a batch.
        messages: list[Message] = yield self._call(queue_name, "pop", count, wait_ms,
                                                   min_count=1)
        return messages

    def pop(self, queue_name: str, count: int, timeout_ms: int) -> CallOp[list[str]]:
        messages = yield from self.poll_messages(queue_name, count, timeout_ms)
        return [m.id for m in messages]

    def by_id(self, queue_name: str, method: str, id: str, *args: Any) -> CallOp[Any]:
        """One call on one message: ``method(id, *args)`` (remove, ack, contains, ...)."""
        return (yield self._call(queue_name, method, message_id(id), *args))

    def set_unack_timeout(self, queue_name: str, id: str, unack_timeout_ms: int,
                          only_if_shorter: bool) -> CallOp[bool]:
        lease_ms = milliseconds("unack_timeout_ms", unack_timeout_ms)
        method = "set_unack_timeout_if_shorter" if only_if_shorter else "set_unack_timeout"
        return bool((yield from self.by_id(queue_name, method, id, lease_ms)))

    def on_queue(self, queue_name: str, method: str) -> CallOp[Any]:
        """One call on the whole queue (size, clear, process_unacks)."""
        return (yield self._call(queue_name, method))

    def set_offset_time(self, queue_name: str, id: str, offset_time_s: int,
                        release_leased: bool) -> CallOp[bool]:
        delay_ms = seconds("offset_time_s", offset_time_s)
        # set_timeout changes waiting messages only; postpone also ends a lease. Both keep the
        # priority and are one script each.
        method = "postpone" if flag("release_leased", release_leased) else "set_timeout"
        return bool((yield from self.by_id(queue_name, method, id, delay_ms)))

    def postpone(self, queue_name: str, id: str, prio: int, postpone_s: int) -> CallOp[bool]:
        message = self._message(id, postpone_s, prio, "postpone_s")
        for _ in range(POSTPONE_ATTEMPTS):
            # Each step is one script: the message is moved if it is there, else pushed if it
            # is still absent. Only an id pushed or removed by someone else in between makes
            # both steps miss; then look again.
            if (yield self._call(queue_name, "postpone", message.id, message.timeout,
                                 priority=message.priority)):
                return True
            if (yield self._call(queue_name, "ensure", message)):
                return True
        raise RedisOperationError("postpone", queue_name,
                                  f"message {id!r} kept appearing and vanishing during "
                                  f"{POSTPONE_ATTEMPTS} attempts")

    def queues_detail(self, method: str) -> CallOp[dict[str, Any]]:
        """``{name: queue.method()}`` for every queue in Redis under the factory's prefix."""
        names = yield from queue_names(self.queues, "queues_detail")
        detail: dict[str, Any] = {}
        for name in names:
            try:
                call = self._call(name, method)
            except ConfigurationError:  # a key this library could not have written
                continue
            detail[name] = yield call
        return detail
