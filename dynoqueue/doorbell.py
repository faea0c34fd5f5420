"""Doorbell: wakes waiting pops when a shard gets a message that is due earlier than any before.

Scripts that add to a shard's queue zset PUBLISH on a channel named like that zset when the new
score is below the shard's previous earliest score (or the shard was empty). One listener thread
per queue holds a pub/sub subscription to the channels of all shards; waiting pops block on a
condition variable with a per-channel counter, so a pop waits without sending any command until
either the doorbell rings, its next message falls due, or its deadline (or the fallback poll
interval) passes. Without a doorbell (a producer that does not ring, such as the Java client, or
a lost subscription) the waiting pop still polls, just less often.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

from redis.exceptions import RedisError

from .message import as_text

log = logging.getLogger("dynoqueue.doorbell")

# How often the listener checks whether it was closed, so also how long close() may wait. Only a
# local select() on the subscription socket: it sends Redis nothing.
_LISTEN_TICK_S = 0.1
_RECONNECT_DELAY_S = (0.05, 1.0)  # first and longest pause between reconnection attempts


class Doorbell:
    """A pub/sub listener thread over a fixed set of channels.

    Args:
        conn: the redis-py client to subscribe through (the quorum connection: scripts publish
            on the primary).
        channels: the channel names, one per shard.
        enabled: False for servers without pub/sub (Dynomite): no thread, no subscription;
            :meth:`wait` only sleeps, so waiting pops poll.
    """

    def __init__(self, conn: Any, channels: Sequence[str], enabled: bool = True) -> None:
        self.enabled = enabled
        self._conn = conn
        self._channels = list(channels)
        self._rings = dict.fromkeys(self._channels, 0)
        self._cond = threading.Condition()
        self._listening = False
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dynoqueue-doorbell", daemon=True)
        if enabled:
            self._thread.start()

    @property
    def listening(self) -> bool:
        """True while the subscription to every channel is confirmed."""
        return self._listening

    def wait_until_listening(self, timeout_s: float) -> bool:
        """Block until subscribed (or ``timeout_s`` seconds pass); return whether it is."""
        with self._cond:
            return self._cond.wait_for(lambda: self._listening or self._closed.is_set(), timeout_s)

    def ticket(self, channels: Sequence[str]) -> int:
        """A token for :meth:`wait`: take it before checking the queue, so no ring is missed."""
        with self._cond:
            return sum(self._rings[c] for c in channels)

    def wait(self, channels: Sequence[str], ticket: int, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` seconds for a ring on any of ``channels`` after ``ticket``.

        Returns:
            True if rung (or the subscription was re-established, which may have missed rings),
            False on timeout.
        """
        with self._cond:
            return self._cond.wait_for(
                lambda: sum(self._rings[c] for c in channels) != ticket or self._closed.is_set(),
                timeout_s,
            )

    def close(self) -> None:
        """Stop the listener thread and wait for it to end."""
        self._closed.set()
        with self._cond:
            self._cond.notify_all()
        if self.enabled:
            self._thread.join(timeout=5)

    def _bump(self, channel: str | None) -> None:
        with self._cond:
            for name in [channel] if channel is not None else self._channels:
                if name in self._rings:
                    self._rings[name] += 1
            self._cond.notify_all()

    def _run(self) -> None:
        delay = _RECONNECT_DELAY_S[0]
        while not self._closed.is_set():
            pubsub = None
            try:
                pubsub = self._conn.pubsub()
                pubsub.subscribe(*self._channels)
                confirmed = 0
                while not self._closed.is_set():
                    msg = pubsub.get_message(timeout=_LISTEN_TICK_S)
                    if msg is None:
                        continue
                    kind = as_text(msg["type"])
                    if kind == "message":
                        self._bump(as_text(msg["channel"]))
                    elif kind == "subscribe":
                        confirmed += 1
                        if confirmed == len(self._channels):
                            # Rings may have been missed while not subscribed: wake everyone.
                            self._listening = True
                            delay = _RECONNECT_DELAY_S[0]
                            self._bump(None)
            except RedisError as exc:
                if self._listening:
                    log.warning("doorbell subscription lost, waiting pops will poll: %s", exc)
                self._listening = False
                self._closed.wait(delay)
                delay = min(delay * 2, _RECONNECT_DELAY_S[1])
            except Exception:  # never let the listener die: pops would fall back to polling
                log.exception("doorbell listener failed; restarting")
                self._listening = False
                time.sleep(delay)
            finally:
                if pubsub is not None:
                    try:
                        pubsub.close()
                    except RedisError:
                        pass
        self._listening = False

