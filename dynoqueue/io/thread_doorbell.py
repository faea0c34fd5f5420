"""The sync API's doorbell: the listener of :mod:`dynoqueue.core.doorbell` in a daemon thread,
and a condition variable that waiting pops block on (:class:`ThreadDoorbell`)."""

from __future__ import annotations

import contextlib
import select
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from redis.exceptions import RedisClusterException, RedisError, ResponseError

from ..core import doorbell as bell
from ..core import requests as rq
from .doorbells import DoorbellBase, Sharded, lacks_sharded, sharded


class ThreadDoorbell(DoorbellBase):
    """A pub/sub listener thread over a fixed set of channels.

    Args:
        conn: the client to subscribe through (the quorum connection: scripts publish on the
            primary).
        channels: the channel names, one per shard.
        enabled: False for servers without pub/sub (Dynomite): no thread, no subscription;
            :meth:`wait` only sleeps, so waiting pops poll.
    """

    def __init__(self, conn: Any, channels: Sequence[str], enabled: bool = True) -> None:
        super().__init__(conn, channels, enabled)
        self._cond = threading.Condition()
        self._closed = threading.Event()
        self._handlers: dict[type, Callable[[Any], Any]] = {
            bell.Subscribe: self._subscribe, bell.NextMessage: self._next,
            bell.Unsubscribe: self._unsubscribe, bell.Rang: self._rang,
            bell.Listening: self._listening, bell.Pause: lambda r: self._closed.wait(r.seconds),
        }
        self._thread = threading.Thread(target=self._run, args=(channels,),
                                        name="dynoqueue-doorbell", daemon=True)
        if enabled:
            self._thread.start()

    def wait_until_listening(self, timeout_s: float) -> bool:
        """Block until subscribed (or ``timeout_s`` seconds pass); return whether it is."""
        with self._cond:
            return self._cond.wait_for(lambda: self.rings.listening or self.rings.denied
                                       or self._closed.is_set(), timeout_s)

    def ticket(self, channels: Sequence[str]) -> int:
        """A token for :meth:`wait`: take it before checking the queue, so no ring is missed."""
        with self._cond:
            return self.rings.ticket(channels)

    def wait(self, channels: Sequence[str], ticket: int, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` seconds for a ring on any of ``channels`` after ``ticket``.

        Returns:
            True if rung (or closed, or resubscribed), False on timeout.
        """
        with self._cond:
            return self._cond.wait_for(
                lambda: self.rings.ticket(channels) != ticket or self._closed.is_set(), timeout_s)

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the listener thread and wait up to ``timeout_s`` seconds for it to end (a
        daemon thread stuck on a frozen server ends at its socket timeout, unwaited)."""
        self._closed.set()
        with self._cond:
            self._cond.notify_all()
        if self.enabled:
            self._thread.join(timeout=timeout_s)

    def _run(self, channels: Sequence[str]) -> None:
        step = rq.Step(bell.listen(channels, self._closed.is_set))
        while step.pending:
            try:
                step.send(self._handlers[type(step.request)](step.request))
            except Exception as exc:  # handed to the listener, which logs and retries
                step.send(None, exc)

    def _subscribe(self, request: bell.Subscribe) -> Any:
        pubsub = self._conn.pubsub()
        try:
            if sharded(self._conn, pubsub):
                try:
                    pubsub.ssubscribe(*request.channels)
                    return Sharded(pubsub)
                except ResponseError as exc:  # no SSUBSCRIBE (Redis < 7): plain pub/sub
                    if not lacks_sharded(exc):
                        raise
            pubsub.subscribe(*request.channels)
        except BaseException:
            self._unsubscribe(bell.Unsubscribe(pubsub))
            raise
        return pubsub

    def _next(self, request: bell.NextMessage) -> Any:
        handle = request.handle
        if type(handle) is Sharded:
            return _next_sharded(handle, request.timeout_s)
        return handle.get_message(timeout=request.timeout_s)

    def _unsubscribe(self, request: bell.Unsubscribe) -> None:
        handle = request.handle
        with contextlib.suppress(RedisError, RedisClusterException, OSError):
            (handle.pubsub if type(handle) is Sharded else handle).close()

    def _rang(self, request: bell.Rang) -> None:
        with self._cond:
            self.rings.bump(request.channel)
            self._cond.notify_all()

    def _listening(self, request: bell.Listening) -> None:
        if request.denied is not None:
            bell.report_denied(self._conn, self.rings.channels, request.denied)
        with self._cond:
            self.rings.listening = request.value
            self.rings.denied = request.denied is not None
            self._cond.notify_all()


def _next_sharded(handle: Sharded, timeout_s: float) -> Any:
    """The next message of any node of a sharded subscription within ``timeout_s``: what the
    nodes' connections already hold first (a non-blocking look at each), else whatever node's
    socket becomes readable first (select), else None."""
    message = handle.pubsub.get_sharded_message(timeout=0.0)
    if message is not None:
        return message
    sockets = [sock for p in handle.node_pubsubs()
               if p.connection is not None
               and (sock := getattr(p.connection, "_sock", None)) is not None]
    if not sockets:
        time.sleep(timeout_s)
        return None
    readable, _, _ = select.select(sockets, [], [], timeout_s)
    return handle.pubsub.get_sharded_message(timeout=0.0) if readable else None
