"""The kombu Transport of dynoqueue: one shared RedisQueues factory, channels, draining.

kombu makes one Transport per Connection. It checks ``transport_options`` at once
(:func:`~dynoqueue.kombu.options.parse_options`), and on connect takes the process's shared
factory for the broker URL (:mod:`dynoqueue.kombu.factories`) and pings it, so a wrong
address or password fails there. ``drain_events`` hands the wait to the consuming channels
(:meth:`Channel.drain`); in an event loop (``register_with_event_loop``) each loop tick
delivers what is ready without waiting.
"""

from __future__ import annotations

import socket
import time
from typing import Any

import redis

from ..connect.urls import redact_url
from ..errors import AccessDeniedError, ConfigurationError, QueueClosedError, RedisOperationError
from ..queues import RedisQueues
from . import factories
from ._kombu import ChannelError, KombuConnectionError, VirtualTransport
from .channel import Channel
from .options import TransportOptions, parse_options
from .urls import redis_url


class Transport(VirtualTransport):  # type: ignore[misc]
    """kombu transport over dynoqueue queues (``dynoqueue://``, ``dynoqueues://``,
    ``dynoqueue+sentinel://``, ``dynoqueue+cluster://``; or
    ``transport="dynoqueue.kombu:Transport"`` with any of them or a ``redis://`` URL).

    Mirrors ``kombu.transport.redis.Transport`` for Celery (priorities 0 first, fanout over
    pub/sub, bindings in Redis), with delayed messages stored in Redis, heartbeat-extended
    leases instead of a visibility timeout, dead letters, zones and Redis Cluster.

    Args:
        client: the ``kombu.Connection``.

    Raises:
        ConfigurationError: (a ValueError) a bad transport option or URL, before any I/O.
    """

    Channel = Channel
    #: kombu hands the whole URL over: :func:`~dynoqueue.kombu.urls.redis_url` reads it.
    can_parse_url = True
    default_port = 6379
    driver_type = "redis"
    driver_name = "dynoqueue"
    polling_interval = 0.1
    implements = VirtualTransport.implements.extend(
        asynchronous=False,
        exchange_type=frozenset(["direct", "topic", "fanout"]),
        heartbeats=False,
    )
    connection_errors = (KombuConnectionError, RedisOperationError, redis.ConnectionError,
                         redis.TimeoutError, OSError, socket.timeout)
    channel_errors = (ChannelError, QueueClosedError, redis.ResponseError)

    def __init__(self, client: Any, **kwargs: Any) -> None:
        self.options: TransportOptions = parse_options(client.transport_options)
        super().__init__(client, **kwargs)
        self.polling_interval = self.options.polling_interval
        self.factory: RedisQueues | None = None
        #: queue -> the fanout exchange it is bound to (its messages come over pub/sub).
        self.fanout_queues: dict[str, str] = {}
        self._next_channel = 0

    def as_uri(self, uri: str, include_password: bool = False, mask: str = "**") -> str:
        """The broker URL as kombu shows it (``celery worker``'s banner, logs): the password
        masked unless ``include_password``; multi-host URLs (Sentinel, Cluster) kept whole."""
        uri = uri or "localhost"
        prefix = getattr(self.client, "uri_prefix", None)
        if prefix and "://" in uri and not uri.startswith(str(prefix)):
            uri = f"{prefix}+{uri}"
        return uri if include_password else redact_url(uri)

    def driver_version(self) -> str:
        """The redis-py version (kombu reports it, e.g. in ``celery report``)."""
        return str(redis.__version__)

    def establish_connection(self) -> Any:
        """Take the shared factory and ping Redis (quorum, reads and the doorbell).

        Raises:
            ConfigurationError: a bad URL or option, or Redis refused the login or a
                permission (not a connection error: kombu and Celery do not retry it).
            RedisOperationError: Redis cannot be reached (kombu retries it).
        """
        if self.factory is None:
            url = redis_url(self.client)
            factory = factories.acquire(url, self.options)
            try:
                factory.ping()
            except AccessDeniedError as exc:
                factories.release(factory)
                raise ConfigurationError(f"Redis refused the broker's login: {exc}") from exc
            except BaseException:
                factories.release(factory)
                raise
            self.factory = factory
        return super().establish_connection()

    def create_channel(self, connection: Any) -> Any:
        if self.factory is None:
            raise ConfigurationError("the dynoqueue transport is not connected")
        return super().create_channel(connection)

    def close_connection(self, connection: Any) -> None:
        try:
            super().close_connection(connection)
        finally:
            factory, self.factory = self.factory, None
            if factory is not None:
                factories.release(factory)

    def drain_events(self, connection: Any, timeout: float | None = None) -> None:
        """Deliver the next ready messages of the consuming channels, waiting up to
        ``timeout`` seconds (None: until one comes).

        Raises:
            socket.timeout: nothing came in time (kombu's contract).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = 1.0 if deadline is None else max(0.0, deadline - time.monotonic())
            channels = [c for c in self.channels if c.consuming]
            if not channels:
                time.sleep(min(remaining, self.polling_interval))
            elif len(channels) == 1:
                if channels[0].drain(remaining):
                    return
            else:  # e.g. a worker's task channel and its remote-control channel
                start = self._next_channel % len(channels)
                self._next_channel = start + 1
                order = channels[start:] + channels[:start]
                if any(channel.drain(0) for channel in order):  # what is ready, first
                    return
                share = min(remaining, self.polling_interval) / len(channels)
                if any(channel.drain(share) for channel in order):
                    return
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError()

    def register_with_event_loop(self, connection: Any, loop: Any) -> None:
        """Deliver ready messages on each tick of kombu's event loop (``Hub``)."""
        loop.on_tick.add(self._on_tick)

    def _on_tick(self) -> None:
        for channel in list(self.channels):
            if channel.consuming:
                channel.drain(0)
