"""The leases a kombu channel holds: ack, reject, restore, and the heartbeat that extends them.

Every message a channel delivers without ``no_ack`` is a dynoqueue lease, held here by its
delivery tag until kombu acks or rejects it. A daemon thread (one per channel, started with
the first lease) extends the leases of every held message with ``set_unack_timeout_many``
every ``heartbeat_interval``, so a task that runs far longer than ``visibility_timeout`` is
never delivered twice while its worker lives; when the worker dies, the heartbeats stop and the
message is delivered again once its lease ends.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from ..model.message import Message
from ..queue import DynoQueue
from ._kombu import VirtualQoS, loads

log = logging.getLogger("dynoqueue.kombu")


class QoS(VirtualQoS):  # type: ignore[misc]
    """kombu's virtual QoS (prefetch accounting), with each unacked message's dynoqueue lease.

    ack -> ``ack``; ``reject(requeue=True)`` -> ``nack`` (delivered again at once, counted);
    ``reject(requeue=False)`` -> ``dead_letter`` (reason ``rejected``; or ``ack`` with the
    ``dead_letters=False`` option); restore (channel closed with messages unacked) ->
    ``release`` (delivered again at once, uncounted). Mirrors kombu's Redis transport QoS,
    whose visibility timeout this replaces with heartbeat-extended leases.
    """

    #: The dynoqueue transport restores through ``release``, on any shutdown.
    restore_at_shutdown = True

    def __init__(self, channel: Any, prefetch_count: int = 0) -> None:
        super().__init__(channel, prefetch_count)
        self._held: dict[str, tuple[DynoQueue, Message]] = {}
        self._lock = threading.Lock()
        #: Set whenever a lease ends: wakes a drain waiting for prefetch room.
        self.freed = threading.Event()
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    # -- leases ------------------------------------------------------------------------------

    def hold(self, tag: str, queue: DynoQueue, message: Message) -> None:
        """Record the lease of a delivered message under its delivery tag."""
        with self._lock:
            self._held[tag] = (queue, message)
            start = self._beat is None and not self._stop.is_set()
            if start:
                self._beat = threading.Thread(target=self._beat_loop, daemon=True,
                                              name="dynoqueue-kombu-heartbeat")
        if start and self._beat is not None:
            self._beat.start()

    def is_held(self, tag: str) -> bool:
        """Whether ``tag`` names a lease this channel holds."""
        with self._lock:
            return tag in self._held

    def _take(self, tag: str) -> tuple[DynoQueue, Message] | None:
        with self._lock:
            return self._held.pop(tag, None)

    def ack(self, delivery_tag: str) -> None:
        """Ack the message in dynoqueue (it leaves its queue) and forget its tag."""
        held = self._take(delivery_tag)
        try:
            if held is not None:
                queue, message = held
                queue.ack(message.id, receipt=message.receipt)
        finally:
            self._quick_ack(delivery_tag)
            self.freed.set()

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        """Requeue (nack: due again at once, the delivery counted toward ``max_deliveries``)
        or, without requeue, dead-letter the message (reason ``rejected``)."""
        held = self._take(delivery_tag)
        try:
            if held is not None:
                queue, message = held
                if requeue:
                    queue.nack(message.id, 0, receipt=message.receipt)
                elif self.channel.options.dead_letters:
                    queue.dead_letter(message.id, "rejected", error=_describe(message),
                                      receipt=message.receipt)
                else:
                    queue.ack(message.id, receipt=message.receipt)
        finally:
            self._quick_ack(delivery_tag)
            self.freed.set()

    def restore_unacked(self) -> list[tuple[BaseException, Any]]:
        """Give every held lease back (``release``: due again at once, uncounted)."""
        self._flush()
        with self._lock:
            held = list(self._held.values())
            self._held.clear()
        self._delivered.clear()
        errors: list[tuple[BaseException, Any]] = []
        by_queue: dict[str, tuple[DynoQueue, list[Message]]] = {}
        for queue, message in held:
            by_queue.setdefault(queue.name, (queue, []))[1].append(message)
        for queue, messages in by_queue.values():
            try:
                queue.release(messages)
            except Exception as exc:  # each queue on its own; their leases still expire
                errors.append((exc, messages))
        self.freed.set()
        return errors

    def restore_unacked_once(self, stderr: Any = None) -> Any:
        """Restore at channel close, once (kombu's contract), then stop the heartbeat."""
        try:
            return super().restore_unacked_once(stderr)
        finally:
            self.stop()

    # -- heartbeat ---------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop the heartbeat thread (the leases then run out unless acked)."""
        self._stop.set()
        beat = self._beat
        if beat is not None and beat is not threading.current_thread():
            beat.join(timeout=1.0)

    def beat_once(self) -> int:
        """Extend every held lease to ``visibility_timeout`` from now; returns how many."""
        with self._lock:
            held = list(self._held.values())
        by_queue: dict[str, tuple[DynoQueue, list[Message]]] = {}
        for queue, message in held:
            by_queue.setdefault(queue.name, (queue, []))[1].append(message)
        extended = 0
        lease_ms = self.channel.options.lease_ms
        for queue, messages in by_queue.values():
            extended += queue.set_unack_timeout_many(messages, lease_ms)
        return extended

    def _beat_loop(self) -> None:
        interval = self.channel.options.beat_s
        while not self._stop.wait(interval):
            try:
                self.beat_once()
            except Exception:  # the next beat tries again; a lease lost here is redelivered
                log.exception("extending the leases of held messages failed")


def _describe(message: Message) -> str:
    """What a dead letter records as its last error: the Celery task, when it is one."""
    try:
        headers = (loads(message.payload or "{}").get("headers") or {})
    except ValueError:
        headers = {}
    task, task_id = headers.get("task"), headers.get("id")
    if task or task_id:
        return f"rejected by the consumer (requeue=False): task {task} id {task_id}"
    return "rejected by the consumer (requeue=False)"
