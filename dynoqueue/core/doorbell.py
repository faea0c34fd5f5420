"""The doorbell: wakes waiting pops when a shard gets a message due earlier than any before.

Scripts that add to a shard's queue zset PUBLISH on a channel named like that zset when the new
score is below the shard's previous earliest score (or the shard was empty). On Redis Cluster
they SPUBLISH and the listener SSUBSCRIBEs (sharded pub/sub, Redis 7+): a ring reaches the
nodes of the channel's slot, the same slot as the zset, instead of every node over the cluster
bus; a server without them falls back to PUBLISH and SUBSCRIBE. One listener per
queue (a thread in the sync API, a task in the asyncio API) holds a pub/sub subscription to the
channels of all shards and counts rings per channel in :class:`Rings`; a waiting pop takes a
ticket (the sum of its channels' counts) before it claims, then waits until the sum changes,
its next message falls due, or its deadline passes. It sends no command while it waits.

:func:`listen` is the listener's logic, written once: it yields the requests below and the
doorbell of each API (:mod:`dynoqueue.io`) answers them.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Generator, Sequence
from typing import Any

from redis.exceptions import NoPermissionError, RedisError

from ..model.message import as_text

log = logging.getLogger("dynoqueue.doorbell")

#: How often the listener checks whether it was closed, so also how long close() may wait. A
#: local select() on the subscription socket: it sends Redis nothing.
LISTEN_TICK_S = 0.1
#: First and longest pause between reconnection attempts (doubling in between).
RECONNECT_DELAY_S = (0.05, 2.0)
#: Pause before subscribing again after the server refused the channels (ACL): a permission
#: granted later is picked up, without filling the server's ACL LOG.
DENIED_RETRY_S = 60.0

_reported: weakref.WeakSet[Any] = weakref.WeakSet()
_reported_lock = threading.Lock()


def report_denied(conn: Any, channels: Sequence[str], reason: str) -> None:
    """Log, once per client (so once per factory), that the doorbell is unavailable."""
    with _reported_lock:
        if conn in _reported:
            return
        _reported.add(conn)
    log.warning("doorbell unavailable: the user may not subscribe to %s (%s); waiting pops "
                "poll every poll_interval_ms instead (grant it with ACL SETUSER <user> "
                "'&<prefix>.QUEUE.*', or pass doorbell=False)", channels[0], reason)


class Rings:
    """Ring counts per channel, and whether the subscription is confirmed.

    Not locked: the sync doorbell guards it with its condition variable, the asyncio doorbell
    touches it from one event loop only.
    """

    def __init__(self, channels: Sequence[str]) -> None:
        self.channels = list(channels)
        self.counts = dict.fromkeys(channels, 0)
        self.listening = False
        #: The server refused the subscription (ACL): waiting pops poll, as with no doorbell.
        self.denied = False

    def ticket(self, channels: Sequence[str]) -> int:
        """The token a waiting pop compares against: the sum of its channels' ring counts."""
        return sum(self.counts[c] for c in channels)

    def bump(self, channel: str | None) -> None:
        """Count a ring on ``channel``; None rings every channel (after a resubscription,
        which may have missed rings)."""
        for name in self.counts if channel is None else (channel,):
            if name in self.counts:
                self.counts[name] += 1


class Subscribe:
    """Open a pub/sub subscription to ``channels``; reply: a handle for the requests below."""

    __slots__ = ("channels",)

    def __init__(self, channels: Sequence[str]) -> None:
        self.channels = channels


class NextMessage:
    """The next pub/sub message of ``handle`` within ``timeout_s`` (a dict), or None."""

    __slots__ = ("handle", "timeout_s")

    def __init__(self, handle: Any, timeout_s: float) -> None:
        self.handle = handle
        self.timeout_s = timeout_s


class Unsubscribe:
    """Close the subscription ``handle`` (errors ignored)."""

    __slots__ = ("handle",)

    def __init__(self, handle: Any) -> None:
        self.handle = handle


class Rang:
    """Record a ring on ``channel`` (None: all) in the Rings and wake the waiting pops."""

    __slots__ = ("channel",)

    def __init__(self, channel: str | None) -> None:
        self.channel = channel


class Listening:
    """Record whether the subscription is confirmed (and wake pops waiting for it); with
    ``denied`` (the server's reason), that the server refused it: report it once per factory
    (:func:`report_denied`) and have waiting pops poll."""

    __slots__ = ("denied", "value")

    def __init__(self, value: bool, denied: str | None = None) -> None:
        self.value = value
        self.denied = denied


class Pause:
    """Sleep ``seconds`` before reconnecting, cut short when the doorbell is closed."""

    __slots__ = ("seconds",)

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds


ListenOp = Generator[Subscribe | NextMessage | Unsubscribe | Rang | Listening | Pause, Any, None]


def listen(channels: Sequence[str], closed: Callable[[], bool]) -> ListenOp:
    """The listener: subscribe, count rings, resubscribe with back-off until ``closed()``.

    Any error, a Redis one or not, ends the subscription, logs once per outage (a traceback
    only for unexpected errors) and retries after a pause that doubles up to
    ``RECONNECT_DELAY_S[1]``; the listener itself never dies, or waiting pops would only poll.
    A refused subscription (no ACL permission for the channels) is reported once per factory
    and retried every ``DENIED_RETRY_S``; meanwhile waiting pops poll.
    """
    delay = RECONNECT_DELAY_S[0]
    listening = False
    while not closed():
        handle = None
        try:
            handle = yield Subscribe(channels)
            confirmed = 0
            while not closed():
                message = yield NextMessage(handle, LISTEN_TICK_S)
                if message is None:
                    continue
                kind = as_text(message["type"])
                if kind in ("message", "smessage"):  # smessage: sharded pub/sub (Cluster)
                    yield Rang(as_text(message["channel"]))
                elif kind == "sunsubscribe":  # its slot moved: the client re-subscribes
                    yield Rang(None)  # at the new owner; rings may be missed meanwhile
                elif kind in ("subscribe", "ssubscribe"):
                    confirmed += 1
                    if confirmed == len(channels):
                        listening = True
                        delay = RECONNECT_DELAY_S[0]
                        yield Listening(True)
                        yield Rang(None)  # rings may have been missed while not subscribed
        except Exception as exc:  # never let the listener die (see the docstring)
            if closed():  # the close shut the socket under a read: no outage, nothing to log
                break
            if isinstance(exc, NoPermissionError):  # no channel permission: poll, retry rarely
                listening = False
                yield Listening(False, denied=str(exc))
                if handle is not None:
                    yield Unsubscribe(handle)
                    handle = None
                yield Pause(DENIED_RETRY_S)
                continue
            if listening or delay == RECONNECT_DELAY_S[0]:
                if isinstance(exc, RedisError):
                    log.warning("doorbell subscription lost, waiting pops will poll: %s", exc)
                else:
                    log.exception("doorbell listener failed; retrying")
            listening = False
            yield Listening(False)
            if handle is not None:
                yield Unsubscribe(handle)
                handle = None
            yield Pause(delay)
            delay = min(delay * 2, RECONNECT_DELAY_S[1])
        if handle is not None:
            yield Unsubscribe(handle)
    yield Listening(False)
