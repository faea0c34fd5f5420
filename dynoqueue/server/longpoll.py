"""Held pulls (Camellia's longPollingMsg, Youzan's pop with a timeout), many per topic.

One waiting pop per held request would wake every one of them at each doorbell ring and send
as many claims for a single message: with 500 held polls, 500 claims per push. Instead each
topic has one dispatcher: a single waiting pop that claims for the held requests in arrival
order (as many messages as they ask for together) and hands each its share. Leases a request
can no longer take (it timed out or its client went away meanwhile) are given back at once,
uncounted (``release``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from ..asyncio.queue import DynoQueue
from ..model.message import Message

log = logging.getLogger("dynoqueue.server")

#: Longest single wait of a dispatcher's pop, s: it then looks at its requests again.
DISPATCH_WAIT_S = 1.0
#: Most messages one dispatcher pop claims.
DISPATCH_MAX = 1000
#: A held request checks this often whether its client went away, s.
DISCONNECT_CHECK_S = 0.5


@dataclass(eq=False)
class _Held:
    batch: int
    lease_ms: int
    deadline: float
    future: asyncio.Future[list[Message]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future())


class _Topic:
    def __init__(self, queue: DynoQueue) -> None:
        self.queue = queue
        self.held: deque[_Held] = deque()
        self.task: asyncio.Task[None] | None = None

    async def dispatch(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while self.held and self.held[0].future.done():
                self.held.popleft()
            if not self.held:
                return
            head = self.held[0]
            group = [h for h in self.held if h.lease_ms == head.lease_ms and not h.future.done()]
            count = min(sum(h.batch for h in group), DISPATCH_MAX)
            wait_s = min(DISPATCH_WAIT_S, max(0.0, min(h.deadline for h in group) - loop.time()))
            try:
                got = await self.queue.pop(count, int(wait_s * 1000), lease_ms=head.lease_ms,
                                           min_count=1)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis down: the held requests answer with an error
                for held in group:
                    if not held.future.done():
                        held.future.set_exception(exc)
                await asyncio.sleep(0.1)
                continue
            await self.hand_out(group, got)

    async def hand_out(self, group: list[_Held], got: list[Message]) -> None:
        for held in group:
            if not got:
                break
            if held.future.done():
                continue
            share, got = got[:held.batch], got[held.batch:]
            held.future.set_result(share)
        if got:  # nobody left to take them
            await _give_back(self.queue, got)


class LongPolls:
    """The held pulls of one server, per topic."""

    def __init__(self) -> None:
        self._topics: dict[str, _Topic] = {}
        #: The server is stopping: nothing is held any more.
        self.stopping = False

    async def pull(self, topic: str, queue: DynoQueue, batch: int, lease_ms: int,
                   hold_ms: int, gone: Callable[[], Awaitable[bool]]) -> list[Message]:
        """Lease up to ``batch`` messages of ``topic``, holding up to ``hold_ms`` until one is
        due; ``gone()`` says whether the client went away (then nothing is kept).

        Returns:
            The leased messages ([] at the timeout or when the client went away).
        """
        first = await queue.pop(batch, 0, lease_ms=lease_ms)
        if first or hold_ms <= 0 or self.stopping:
            return first
        loop = asyncio.get_running_loop()
        held = _Held(batch, lease_ms, loop.time() + hold_ms / 1000)
        entry = self._topics.get(topic)
        if entry is None or entry.queue is not queue:
            entry = self._topics[topic] = _Topic(queue)
        entry.held.append(held)
        if entry.task is None or entry.task.done():
            entry.task = asyncio.ensure_future(entry.dispatch())
        client_gone = False
        try:
            while not held.future.done():
                remaining = held.deadline - loop.time()
                if remaining <= 0:
                    break
                await asyncio.wait({held.future}, timeout=min(remaining, DISCONNECT_CHECK_S))
                if not held.future.done() and await gone():
                    client_gone = True
                    break
        finally:
            if not held.future.done():
                held.future.cancel()
        if held.future.cancelled():
            return []
        messages = held.future.result()  # raises the dispatcher's error, if any
        if client_gone:
            await _give_back(queue, messages)
            return []
        return messages

    def stop_holding(self) -> None:
        """Answer every held pull now, empty, and hold no new one (the server is stopping:
        its clients get a 200 with no message at once instead of an error at the end of the
        graceful shutdown). The dispatchers' waiting pops are cancelled, which puts back what
        they had leased."""
        self.stopping = True
        for entry in self._topics.values():
            for held in entry.held:
                if not held.future.done():
                    held.future.set_result([])
            if entry.task is not None:
                entry.task.cancel()

    async def close(self) -> None:
        for entry in self._topics.values():
            if entry.task is not None:
                entry.task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await entry.task


async def _give_back(queue: DynoQueue, messages: list[Message]) -> None:
    try:
        await queue.release(messages)
    except Exception as exc:  # their leases expire instead
        log.warning("could not give back %d leases of %s: %s", len(messages), queue.name, exc)
