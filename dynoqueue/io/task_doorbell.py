"""The asyncio API's doorbell: the listener of :mod:`dynoqueue.core.doorbell` as a task, and an
asyncio condition that waiting pops await (:class:`TaskDoorbell`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from redis.exceptions import RedisClusterException, RedisError, ResponseError

from ..core import doorbell as bell
from ..core import requests as rq
from .doorbells import DoorbellBase, Sharded, lacks_sharded, sharded

Handler = Callable[[Any], Awaitable[Any]]


class TaskDoorbell(DoorbellBase):
    """A pub/sub listener task over a fixed set of channels (see :class:`ThreadDoorbell` in
    :mod:`dynoqueue.io.sync` for the contract); created inside the running event loop."""

    def __init__(self, conn: Any, channels: Sequence[str], enabled: bool = True) -> None:
        super().__init__(conn, channels, enabled)
        self._changed = asyncio.Condition()
        self._closed = asyncio.Event()
        self._handlers: dict[type, Handler] = {
            bell.Subscribe: self._subscribe, bell.NextMessage: self._next,
            bell.Unsubscribe: self._unsubscribe, bell.Rang: self._rang,
            bell.Listening: self._listening, bell.Pause: self._pause,
        }
        self._task = (asyncio.get_running_loop().create_task(self._run(channels),
                                                             name="dynoqueue-doorbell")
                      if enabled else None)

    async def wait_until_listening(self, timeout_s: float) -> bool:
        """Wait until subscribed (or ``timeout_s`` seconds pass); return whether it is."""
        return await self._wait_for(lambda: self.rings.listening or self.rings.denied,
                                    timeout_s)

    async def wait(self, channels: Sequence[str], ticket: int, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for a ring on ``channels`` after ``ticket``; rung?"""
        return await self._wait_for(lambda: self.rings.ticket(channels) != ticket, timeout_s)

    async def _wait_for(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        if predicate() or self._closed.is_set():  # already: no lock, no timer (every claim)
            return True
        async with self._changed:
            try:
                async with asyncio.timeout(timeout_s):  # not wait_for: no task per wait
                    await self._changed.wait_for(lambda: predicate() or self._closed.is_set())
            except TimeoutError:
                return False
        return True

    async def close(self, timeout_s: float = 5.0) -> None:
        """Stop the listener task; wait up to ``timeout_s`` seconds for it to end, then
        cancel it (it may be stuck connecting to a frozen server)."""
        self._closed.set()
        async with self._changed:
            self._changed.notify_all()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(self._task, timeout_s)

    async def _run(self, channels: Sequence[str]) -> None:
        step = rq.Step(bell.listen(channels, self._closed.is_set))
        while step.pending:
            try:
                step.send(await self._handlers[type(step.request)](step.request))
            except Exception as exc:  # handed to the listener, which logs and retries
                step.send(None, exc)

    async def _subscribe(self, request: bell.Subscribe) -> Any:
        # The asyncio RedisCluster reads its slot map at first use; pub/sub needs it first.
        await self._conn.initialize()
        pubsub = self._conn.pubsub()
        try:
            if sharded(self._conn, pubsub):
                try:
                    await pubsub.ssubscribe(*request.channels)
                    return self._read_nodes(Sharded(pubsub))
                except ResponseError as exc:  # no SSUBSCRIBE (Redis < 7): plain pub/sub
                    if not lacks_sharded(exc):
                        raise
            await pubsub.subscribe(*request.channels)
        except BaseException:
            await self._unsubscribe(bell.Unsubscribe(pubsub))
            raise
        return pubsub

    @staticmethod
    def _read_nodes(handle: Sharded) -> Sharded:
        """Start a reader task per node subscription, each putting what it reads (or the
        error that ended it) on one queue that :meth:`_next` takes from."""
        messages: asyncio.Queue[Any] = asyncio.Queue()

        async def read(node_pubsub: Any) -> None:
            try:
                while True:
                    message = await node_pubsub.get_message(timeout=bell.LISTEN_TICK_S)
                    if message is not None:
                        messages.put_nowait(message)
            except Exception as exc:  # handed to the listener, which subscribes again
                messages.put_nowait(exc)

        handle.messages = messages
        handle.readers = [asyncio.ensure_future(read(p)) for p in handle.node_pubsubs()]
        return handle

    async def _next(self, request: bell.NextMessage) -> Any:
        handle = request.handle
        if type(handle) is Sharded:
            try:
                item = await asyncio.wait_for(handle.messages.get(), request.timeout_s)
            except TimeoutError:
                return None
            if isinstance(item, Exception):
                raise item
            return item
        return await handle.get_message(timeout=request.timeout_s)

    async def _unsubscribe(self, request: bell.Unsubscribe) -> None:
        handle = request.handle
        if type(handle) is Sharded:
            for reader in handle.readers:
                reader.cancel()
            await asyncio.gather(*handle.readers, return_exceptions=True)
        with contextlib.suppress(RedisError, RedisClusterException, OSError):
            await (handle.pubsub if type(handle) is Sharded else handle).aclose()

    async def _rang(self, request: bell.Rang) -> None:
        self.rings.bump(request.channel)
        async with self._changed:
            self._changed.notify_all()

    async def _listening(self, request: bell.Listening) -> None:
        if request.denied is not None:
            bell.report_denied(self._conn, self.rings.channels, request.denied)
        self.rings.listening = request.value
        self.rings.denied = request.denied is not None
        async with self._changed:
            self._changed.notify_all()

    async def _pause(self, request: bell.Pause) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._closed.wait(), request.seconds)
