"""Exchange bindings in Redis, and fanout exchanges over Redis pub/sub.

Bindings (exchange -> routing key, pattern, queue) live in one Redis set per exchange under
the key prefix, so a producer in any process routes to queues another process declared
(kombu's Redis transport keeps them the same way). Fanout exchanges (Celery's broadcast
queues, remote control's ``celery.pidbox``, events) are pub/sub channels: a message reaches
the consumers subscribed at that moment, none is stored (as with kombu's Redis transport). On
Redis Cluster they are sharded channels (SPUBLISH / SSUBSCRIBE): a message travels to the
nodes of its channel's slot only.
"""

from __future__ import annotations

from typing import Any

from redis.cluster import RedisCluster

#: Separates the routing key, pattern and queue of a stored binding (as kombu's Redis
#: transport, so a binding never splits on a character a name can hold).
SEP = "\x06\x16"


def binding_key(prefix: str, exchange: str) -> str:
    """The Redis set of ``exchange``'s bindings: ``P.KOMBU.BINDING.<exchange>``."""
    return f"{prefix}.KOMBU.BINDING.{exchange}"


def fanout_channel(prefix: str, exchange: str) -> str:
    """The pub/sub channel of fanout ``exchange``: ``P.KOMBU.FANOUT.<exchange>``."""
    return f"{prefix}.KOMBU.FANOUT.{exchange}"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class Bindings:
    """The binding table of every exchange, stored in Redis.

    Args:
        client: the factory's quorum client (``redis.Redis`` or ``RedisCluster``).
        prefix: the key prefix.
    """

    def __init__(self, client: Any, prefix: str) -> None:
        self._client = client
        self._prefix = prefix

    def add(self, exchange: str, routing_key: str, pattern: str, queue: str) -> None:
        """Record one binding (idempotent)."""
        member = SEP.join([routing_key or "", pattern or "", queue or ""])
        self._client.sadd(binding_key(self._prefix, exchange), member)

    def remove(self, exchange: str, routing_key: str, pattern: str, queue: str) -> None:
        """Forget one binding."""
        member = SEP.join([routing_key or "", pattern or "", queue or ""])
        self._client.srem(binding_key(self._prefix, exchange), member)

    def table(self, exchange: str) -> list[tuple[str, str, str]]:
        """Every ``(routing_key, pattern, queue)`` bound to ``exchange`` ([] for none)."""
        rows = []
        for raw in self._client.smembers(binding_key(self._prefix, exchange)):
            parts = _text(raw).split(SEP)
            if len(parts) == 3:
                rows.append((parts[0], parts[1], parts[2]))
        return rows

    def forget_queue(self, exchange: str, queue: str) -> None:
        """Remove every binding of ``queue`` to ``exchange``."""
        key = binding_key(self._prefix, exchange)
        for raw in self._client.smembers(key):
            if _text(raw).split(SEP)[-1] == queue:
                self._client.srem(key, raw)


class Fanout:
    """Publishing to, and listening on, fanout exchanges for one kombu channel.

    Not thread-safe: the consuming thread subscribes and polls (kombu delivers on it).

    Args:
        client: the factory's quorum client.
        prefix: the key prefix.
    """

    def __init__(self, client: Any, prefix: str) -> None:
        self._client = client
        self._prefix = prefix
        self._sharded = isinstance(client, RedisCluster)
        self._pubsub: Any = None
        self.exchanges: set[str] = set()
        #: Subscriptions asked for whose confirmation was not read yet.
        self.unconfirmed = 0

    def publish(self, exchange: str, payload: str) -> None:
        """Send ``payload`` to every consumer subscribed to ``exchange`` now."""
        channel = fanout_channel(self._prefix, exchange)
        if self._sharded:
            self._client.spublish(channel, payload)
        else:
            self._client.publish(channel, payload)

    def subscribe(self, exchange: str) -> None:
        """Listen on ``exchange`` (idempotent)."""
        if exchange in self.exchanges:
            return
        if self._pubsub is None:
            self._pubsub = self._client.pubsub()
        channel = fanout_channel(self._prefix, exchange)
        if self._sharded:
            self._pubsub.ssubscribe(channel)
        else:
            self._pubsub.subscribe(channel)
        self.exchanges.add(exchange)
        self.unconfirmed += 1

    def unsubscribe(self, exchange: str) -> None:
        """Stop listening on ``exchange``."""
        if exchange not in self.exchanges or self._pubsub is None:
            return
        self.exchanges.discard(exchange)
        channel = fanout_channel(self._prefix, exchange)
        if self._sharded:
            self._pubsub.sunsubscribe(channel)
        else:
            self._pubsub.unsubscribe(channel)

    def poll(self, timeout_s: float) -> tuple[str, str] | None:
        """The next fanout message as ``(exchange, payload)``, waiting up to ``timeout_s``;
        None when none came (a subscription confirmation read meanwhile lowers
        :attr:`unconfirmed`)."""
        if self._pubsub is None or not self.exchanges:
            return None
        if self._sharded:
            reply = self._pubsub.get_sharded_message(ignore_subscribe_messages=False,
                                                     timeout=timeout_s)
        else:
            reply = self._pubsub.get_message(ignore_subscribe_messages=False,
                                             timeout=timeout_s)
        if not reply:
            return None
        kind = _text(reply.get("type"))
        if kind in ("subscribe", "ssubscribe"):
            self.unconfirmed = max(0, self.unconfirmed - 1)
            return None
        if kind not in ("message", "smessage"):
            return None
        name = _text(reply.get("channel"))
        head = fanout_channel(self._prefix, "")
        if not name.startswith(head):
            return None
        return name[len(head):], _text(reply.get("data"))

    def close(self) -> None:
        """Drop the subscription connection."""
        if self._pubsub is not None:
            try:
                self._pubsub.close()
            finally:
                self._pubsub = None
                self.exchanges.clear()
