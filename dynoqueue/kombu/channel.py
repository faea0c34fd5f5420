"""The kombu channel of the dynoqueue transport: kombu queues as dynoqueue queues.

A kombu queue is the dynoqueue queue of the same name (so ``dynoqueue stats``, the dashboard
and ``dynoqueue dead`` show it). publish -> ``push`` (``eta`` -> due time, ``priority`` ->
priority, ``expiration`` -> TTL: :mod:`dynoqueue.kombu.codec`); consume and ``basic_get`` ->
``pop`` with a lease (batched up to the prefetch room; a waiting pop, woken by the doorbell,
instead of sleep-polling); ack / reject / restore -> :mod:`dynoqueue.kombu.qos`; fanout
exchanges -> Redis pub/sub (:mod:`dynoqueue.kombu.fanout`).

Consuming several queues, the channel first sweeps them all without waiting, starting with a
different one each time, then waits on one of them at most ``polling_interval``: no queue
starves, and a message on any queue is seen within ``polling_interval``.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from ..model.message import Message
from ..queue import DynoQueue
from ._kombu import VirtualChannel, dumps, loads
from .codec import from_dynoqueue, to_dynoqueue
from .fanout import Bindings, Fanout
from .options import TransportOptions
from .qos import QoS

_tag_lock = threading.Lock()
_last_ns = 0


def time_ordered_tag() -> str:
    """A new delivery tag (the dynoqueue message id): the publish time in ns as fixed-width
    hex, then a random uuid. Messages due in the same millisecond with the same priority are
    ordered by id, so this keeps them in publish order (within one process)."""
    global _last_ns
    with _tag_lock:
        _last_ns = max(_last_ns + 1, time.time_ns())
        stamp = _last_ns
    return f"{stamp:016x}-{uuid.uuid4().hex}"


def _priority(message: Message) -> int:
    return message.priority


class Channel(VirtualChannel):  # type: ignore[misc]
    """A kombu virtual channel whose queues are dynoqueue queues (see the module docstring).

    Made by :class:`dynoqueue.kombu.Transport`; not meant to be built directly.
    """

    QoS = QoS
    supports_fanout = True
    #: kombu's Redis transport orders 0 first; dynoqueue takes 0..99.
    max_priority = 99

    def __init__(self, connection: Any, **kwargs: Any) -> None:
        super().__init__(connection, **kwargs)
        self.options: TransportOptions = connection.options
        factory = connection.factory
        self._factory = factory
        self._bindings = Bindings(factory.quorum_conn, self.options.key_prefix)
        self._fanout = Fanout(factory.quorum_conn, self.options.key_prefix)
        self._no_ack: set[str] = set()
        self._next = 0

    def _next_delivery_tag(self) -> str:
        return time_ordered_tag()

    # -- queues ------------------------------------------------------------------------------

    def _queue(self, name: str) -> DynoQueue:
        queue: DynoQueue = self._factory.get(name)
        return queue

    def _new_queue(self, queue: str, **kwargs: Any) -> None:
        self._queue(queue)  # checks the name; writes nothing

    def _has_queue(self, queue: str, **kwargs: Any) -> bool:
        return True

    def _put(self, queue: str, message: dict[str, Any], **kwargs: Any) -> None:
        tag = message["properties"]["delivery_tag"]
        self._queue(queue).push([to_dynoqueue(message, tag)])

    def _size(self, queue: str) -> int:
        return self._queue(queue).size()

    def _purge(self, queue: str) -> int:
        q = self._queue(queue)
        size = q.size()
        q.clear()
        return size

    def _delete(self, queue: str, *args: Any, **kwargs: Any) -> None:
        if len(args) == 4:  # exchange, routing key, pattern, queue (virtual's queue_delete)
            self._bindings.remove(*args)
        self._queue(queue).clear()

    # -- exchanges ---------------------------------------------------------------------------

    def get_table(self, exchange: str) -> list[tuple[str, str, str]]:
        """The bindings of ``exchange``, read from Redis (shared by every process)."""
        return self._bindings.table(exchange)

    def _queue_bind(self, exchange: str, routing_key: str, pattern: str, queue: str) -> None:
        if self.typeof(exchange).type == "fanout":
            self.connection.fanout_queues[queue] = exchange
        self._bindings.add(exchange, routing_key, pattern, queue)

    def queue_unbind(self, queue: str, exchange: str | None = None, routing_key: str = "",
                     arguments: Any = None, **kwargs: Any) -> None:
        exchange = exchange or "amq.direct"
        meta = self.typeof(exchange).prepare_bind(queue, exchange, routing_key, arguments)
        self._bindings.remove(exchange, *meta)
        super().queue_unbind(queue, exchange, routing_key, arguments, **kwargs)

    def _put_fanout(self, exchange: str, message: dict[str, Any], routing_key: str,
                    **kwargs: Any) -> None:
        self._fanout.publish(exchange, dumps(message))

    # -- consuming ---------------------------------------------------------------------------

    @property
    def consuming(self) -> bool:
        """Whether any consumer is registered on this channel."""
        return bool(self._consumers)

    def basic_consume(self, queue: str, no_ack: bool, callback: Any, consumer_tag: str,
                      **kwargs: Any) -> Any:
        if no_ack:
            self._no_ack.add(queue)
        else:
            self._no_ack.discard(queue)
        exchange = self.connection.fanout_queues.get(queue)
        if exchange is not None:
            self._fanout.subscribe(exchange)
        return super().basic_consume(queue, no_ack, callback, consumer_tag, **kwargs)

    def basic_cancel(self, consumer_tag: str) -> Any:
        queue = self._tag_to_queue.get(consumer_tag)
        result = super().basic_cancel(consumer_tag)
        exchange = self.connection.fanout_queues.get(queue)
        if exchange is not None and not any(
                self.connection.fanout_queues.get(q) == exchange for q in self._active_queues):
            self._fanout.unsubscribe(exchange)
        return result

    def basic_get(self, queue: str, no_ack: bool = False, **kwargs: Any) -> Any:
        """Lease one due message of ``queue`` now, or None (no waiting)."""
        q = self._queue(queue)
        popped = self._pop(queue, q, 1)
        if not popped:
            return None
        message = popped[0]
        if no_ack:
            q.ack(message.id, receipt=message.receipt)
        raw = self._prepare(queue, message)
        kombu_message = self.Message(raw, channel=self)
        if not no_ack:
            tag = kombu_message.delivery_tag
            self.qos.hold(tag, q, message)
            self.qos.append(kombu_message, tag)
        return kombu_message

    def _prepare(self, queue: str, message: Message) -> dict[str, Any]:
        raw = from_dynoqueue(message, queue)
        tag = message.id if not self.qos.is_held(message.id) else f"{message.id}@{queue}"
        raw["properties"]["delivery_tag"] = tag
        return raw

    def _pop(self, name: str, q: DynoQueue, count: int, wait_ms: int = 0) -> list[Message]:
        """Lease up to ``count`` due messages of queue ``name``, waiting up to ``wait_ms`` for
        the first one: the local shard first, then (``shard_affinity="local_first"``, and
        always for remote-control reply queues) the other zones' shards."""
        if self.options.shard_affinity == "local_only" and not name.endswith(".pidbox"):
            return q.pop(count, wait_ms, min_count=1)
        popped = q.unsafe_pop_all_shards(count, wait_ms, min_count=1)
        if len(popped) > 1:  # a batch from several shards: deliver it in priority order
            popped.sort(key=_priority)
        return popped

    def _budget(self) -> int:
        room = self.qos.can_consume_max_estimate()
        return self.options.pop_batch if room is None else min(room, self.options.pop_batch)

    def _deliver_popped(self, queue: str, q: DynoQueue, popped: list[Message]) -> None:
        no_ack = queue in self._no_ack
        if no_ack:
            q.ack_many(popped)
        prepared = []
        for message in popped:
            raw = self._prepare(queue, message)
            if not no_ack:
                self.qos.hold(raw["properties"]["delivery_tag"], q, message)
            prepared.append((raw, message))
        for index, (raw, _) in enumerate(prepared):
            try:
                self.connection._deliver(raw, queue)
            except BaseException:
                rest = prepared[index + 1:]
                if rest and not no_ack:  # never handed to kombu: give their leases back
                    for later, _ in rest:
                        self.qos._take(later["properties"]["delivery_tag"])
                    q.release([m for _, m in rest])
                raise

    def _deliver_fanout(self, timeout_s: float) -> bool:
        """Deliver one fanout message (waiting up to ``timeout_s``). True when one was
        delivered, or a subscription was confirmed (an event, as kombu's Redis transport
        counts it)."""
        waiting = self._fanout.unconfirmed
        got = self._fanout.poll(timeout_s)
        if got is None:
            return self._fanout.unconfirmed < waiting
        exchange, payload = got
        message = loads(payload)
        for queue in list(self._active_queues):
            if self.connection.fanout_queues.get(queue) == exchange:
                self.connection._deliver(message, queue)
        return True

    def drain(self, wait_s: float) -> bool:
        """Deliver what is ready, waiting up to ``wait_s`` seconds for something.

        Returns:
            True when something was delivered (or a fanout subscription confirmed).
        """
        deadline = time.monotonic() + max(0.0, wait_s)
        interval = self.options.polling_interval
        while True:
            if self._fanout.exchanges and self._deliver_fanout(0):
                return True
            queues = [q for q in dict.fromkeys(self._active_queues)
                      if q not in self.connection.fanout_queues]
            remaining = max(0.0, deadline - time.monotonic())
            budget = self._budget() if queues and self.qos.can_consume() else 0
            if budget > 0:
                if self._pop_some(queues, budget, remaining):
                    return True
            elif self._fanout.exchanges:
                if self._deliver_fanout(min(remaining, interval if queues else 1.0)):
                    return True
            elif queues:  # the prefetch is full: wait for an ack
                self.qos.freed.wait(min(remaining, interval))
                self.qos.freed.clear()
            else:
                time.sleep(min(remaining, interval))
            if time.monotonic() >= deadline:
                return False

    def _pop_some(self, queues: list[str], budget: int, remaining: float) -> bool:
        count = len(queues)
        start = self._next % count
        self._next = start + 1
        order = queues[start:] + queues[:start]
        if count > 1:
            for name in order:
                q = self._queue(name)
                popped = self._pop(name, q, budget)
                if popped:
                    self._deliver_popped(name, q, popped)
                    return True
        cap = self.options.polling_interval if count > 1 or self._fanout.exchanges else 1.0
        wait_ms = int(min(remaining, cap) * 1000)
        q = self._queue(order[0])
        popped = self._pop(order[0], q, budget, wait_ms) if wait_ms or count == 1 else []
        if popped:
            self._deliver_popped(order[0], q, popped)
            return True
        return False

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._fanout.close()
            if self._qos is not None:
                self._qos.stop()
