"""The primary Sentinel names right now, followed live, and the check every quorum reply passes.

redis-py asks the sentinels for the primary only when a connection (re)connects, so a connection
opened before a failover keeps talking to the old primary for as long as that node answers. A
primary that was frozen or cut off (SIGSTOP, a loaded box missing pings) comes back as a
*writable* primary and stays one until Sentinel converts it, ~10 s later; a replica that points
at it lets ``WAIT 1`` succeed there; and all it accepted is discarded when it resyncs from the new
primary. Such writes must never be acknowledged to the caller.

:class:`PrimaryWatcher` keeps :attr:`PrimaryWatcher.address`, the address the sentinels
currently name, in a daemon thread (for both APIs: it never touches an event loop): it subscribes
to ``+switch-master`` (and the failover events before it, :data:`EVENT_CHANNELS`) on every
sentinel and, on each such message, on every (re)subscription, when a connection reports a
mismatch and every :data:`REFRESH_EVERY_S` seconds, asks all sentinels and keeps the answer
with the highest ``config-epoch``, so a sentinel that lags behind cannot move it back. The
quorum connection also reconnects to that address (redis-py's own lookup reads ``SENTINEL
MASTERS``, which names the old primary until the failover has ended), and compares its own
peer address with it after reading every reply (:mod:`dynoqueue.connect.clients`), a local
tuple comparison with no extra round trip. A reply from any other node (a write, its ``WAIT``,
a claim, an error) drops the connection and raises :class:`StalePrimaryError`, a redis-py
``ConnectionError``, so the connection's retry budget sends the call again, to the current
primary. While a sentinel holds the named primary objectively down (``+odown``: a failover
may be promoting another node, and a write it acknowledges then could be lost), no reply
counts at all. Only when the budget runs out does the call fail,
with :class:`~dynoqueue.errors.RedisOperationError`.

Re-sending is safe: every state change is one idempotent script (a re-pushed id is moved, never
duplicated), and what the old node accepted is discarded when it resyncs. Until the watcher has
heard from a sentinel at all (the first milliseconds of a factory), no reply is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

log = logging.getLogger("dynoqueue.connect")

#: Sentinel events after which the watcher asks the sentinels again: the primary is
#: objectively down (a failover may follow) or back; the promoted replica reports itself
#: primary (the leader names it from then on, long before the failover ends); the failover
#: ends; the configuration switches (every sentinel).
EVENT_CHANNELS = ("+odown", "-odown", "+promoted-slave", "+failover-state-reconf-slaves",
                  "+failover-end", "+switch-master")
#: What the check accepts while the named primary is objectively down: no node.
_NOBODY = ("", -1)
#: How often the watcher thread looks at its subscriptions (a local poll: nothing is sent).
LISTEN_TICK_S = 0.1
#: How often the watcher asks the sentinels even without an event (a missed message, a
#: partitioned sentinel): the longest it can be wrong while every subscription looks fine.
REFRESH_EVERY_S = 5.0
#: First and longest pause before subscribing again to a sentinel that failed.
RESUBSCRIBE_S = (0.1, 2.0)


class StalePrimaryError(RedisConnectionError):
    """A reply came from a node the sentinels no longer name as primary (a demoted primary that
    is still writable); the connection was dropped. A redis-py ``ConnectionError``: the
    connection's retry budget sends the call again, through a new Sentinel lookup."""


class PrimaryWatcher:
    """Follows the primary the sentinels name for ``service_name`` (see the module docstring).

    Made by :func:`dynoqueue.connect.builders.from_sentinel`, started once the factory is built
    and closed with it (``close()``, or ``aclose()`` in the asyncio API).

    Args:
        sentinels: ``[(host, port), ...]`` of the sentinels.
        service_name: the monitored primary's name.
        options: keyword arguments of the sync ``redis.Redis`` clients to the sentinels
            (timeouts, TLS, the sentinels' own credentials).
    """

    def __init__(self, sentinels: Sequence[tuple[str, int]], service_name: str,
                 options: Mapping[str, Any]) -> None:
        self.service_name = service_name
        #: ``(host, port)`` of the primary the sentinels name (highest config epoch seen), or
        #: None before the first answer. Replaced as a whole, so it is read without a lock.
        self.address: tuple[str, int] | None = None
        self.epoch = -1
        #: True while a sentinel holds :attr:`address` objectively down: a failover may be
        #: promoting another node, so no reply counts (until it is back or replaced).
        self.doubted = False
        self._accepted: tuple[str, int] | None = None  # what stale() lets through
        self._sentinels = [redis.Redis(host=h, port=p, **options) for h, p in sentinels]
        self._closed = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dynoqueue-sentinel-watcher",
                                        daemon=True)

    # ------------------------------------------------------------------- the hot path

    def stale(self, host: Any, port: Any) -> bool:
        """True when a reply from ``host:port`` must not count: it is not the primary the
        sentinels name, or that primary is objectively down (False while nothing is known).

        Costs one tuple comparison; a mismatch also wakes the watcher to ask the sentinels at
        once, in case it is the watcher that lags (its answer then arrives within the retry's
        first back-off)."""
        accepted = self._accepted
        if accepted is None or (accepted[0] == host and accepted[1] == port):
            return False
        self._wake.set()
        return True

    def error(self, host: Any, port: Any) -> StalePrimaryError:
        """The error a connection to ``host:port`` raises after a refused reply."""
        current = self.address
        named = "nothing" if current is None else f"{current[0]}:{current[1]}"
        why = (f"Sentinel holds {named} objectively down (a failover may be under way)"
               if self.doubted else f"Sentinel names {named} as the primary")
        return StalePrimaryError(f"{host}:{port} answered, but {why} of "
                                 f"{self.service_name!r}: reply discarded, retrying")

    # ------------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Start the watcher thread (once)."""
        if not self._thread.is_alive() and not self._closed.is_set():
            self._thread.start()

    def close(self) -> None:
        """Stop the thread and close the connections to the sentinels. Idempotent."""
        self._closed.set()
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        for client in self._sentinels:
            with contextlib.suppress(RedisError, OSError):
                client.close()

    async def aclose(self) -> None:
        """:meth:`close` for the asyncio API (joins the thread off the event loop)."""
        await asyncio.to_thread(self.close)

    # ------------------------------------------------------------------- the thread

    def suspect(self) -> None:
        """Have the thread ask the sentinels now (a connection to the named primary failed)."""
        self._wake.set()

    def refresh(self) -> tuple[str, int] | None:
        """Ask every sentinel which node is primary (``SENTINEL GET-MASTER-ADDR-BY-NAME``, which
        names the promoted replica as soon as it took over, and ``SENTINEL MASTER`` for the
        config epoch, in one round trip); keep the answer with the highest epoch, never one
        older than already seen. Returns the address now held."""
        best: tuple[int, tuple[str, int]] | None = None
        down: set[tuple[str, int]] = set()
        for client in self._sentinels:
            if self._closed.is_set():
                break
            pipe = client.pipeline(transaction=False)
            pipe.sentinel_master(self.service_name)
            pipe.sentinel_get_master_addr_by_name(self.service_name)
            try:
                state, address = pipe.execute()
            except (RedisError, OSError):
                continue  # down, partitioned, or not monitoring the service: the others answer
            if not isinstance(state, dict) or not address:
                continue
            if state.get("is_odown"):
                down.add((_text(state.get("ip")), int(state.get("port", 0))))
            epoch = int(state.get("config-epoch", 0))
            if best is None or epoch > best[0]:
                best = (epoch, (_text(address[0]), int(address[1])))
        if best is not None and best[0] >= self.epoch:
            epoch, address = best
            doubted = address in down
            if address != self.address or doubted != self.doubted:
                log.info("Sentinel names %s:%d as the primary of %r (config epoch %d)%s",
                         address[0], address[1], self.service_name, epoch,
                         ", objectively down: no reply counts" if doubted else "")
            self.epoch, self.address, self.doubted = epoch, address, doubted
            self._accepted = _NOBODY if doubted else address
        return self.address

    def _run(self) -> None:
        count = len(self._sentinels)
        subscriptions: list[Any] = [None] * count
        retry_at = [0.0] * count
        pause = [RESUBSCRIBE_S[0]] * count
        next_refresh = 0.0
        while not self._closed.is_set():
            changed = self._wake.is_set()
            self._wake.clear()
            now = time.monotonic()
            for i, client in enumerate(self._sentinels):
                try:
                    if subscriptions[i] is None:
                        if now < retry_at[i]:
                            continue
                        subscriptions[i] = client.pubsub(  # type: ignore[no-untyped-call]
                            ignore_subscribe_messages=True)
                        subscriptions[i].subscribe(*EVENT_CHANNELS)
                        pause[i] = RESUBSCRIBE_S[0]
                        changed = True  # events may have been missed while unsubscribed
                    changed = self._drain(subscriptions[i]) or changed
                except (RedisError, OSError) as exc:
                    if pause[i] == RESUBSCRIBE_S[0]:
                        log.info("sentinel %s: %s; resubscribing", client, exc)
                    self._drop(subscriptions[i])
                    subscriptions[i] = None
                    retry_at[i] = now + pause[i]
                    pause[i] = min(pause[i] * 2, RESUBSCRIBE_S[1])
                    changed = True
            if changed or now >= next_refresh:
                self.refresh()
                next_refresh = now + REFRESH_EVERY_S
            self._wake.wait(LISTEN_TICK_S)
        for subscription in subscriptions:
            self._drop(subscription)

    def _drain(self, subscription: Any) -> bool:
        """Read every message waiting on one subscription; True if one names our service
        (``+switch-master``: ``<name> <old ip> <old port> <new ip> <new port>``; the others:
        ``<kind> <name> <ip> <port> [@ <master name> <ip> <port>]``)."""
        ours = False
        while True:
            message = subscription.get_message(timeout=0)
            if message is None:
                return ours
            data = message.get("data")
            if isinstance(data, (bytes, str)) and self.service_name in _text(data).split(" "):
                ours = True

    @staticmethod
    def _drop(subscription: Any) -> None:
        if subscription is not None:
            with contextlib.suppress(RedisError, OSError):
                subscription.close()


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
