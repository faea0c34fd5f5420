"""The adapter interface: how the suite drives one queue library through its public API.

An adapter produces (:meth:`Adapter.enqueue`) in the benchmark's own process and consumes
(:meth:`Adapter.consume`) inside a consumer process started with multiprocessing "spawn". Its
consumer hands each delivered message body to a callback and otherwise does no work, so what
is measured is the library's own cost.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, ClassVar

from ..common import Item

#: Called by a consumer with the bodies of the messages it just received (one or a batch).
OnBatch = Callable[[Sequence[str]], None]


class NotSupported(Exception):
    """The library has no public API for this; the message says why (reported as "n/a")."""


class Adapter:
    """Drives one queue library. Subclasses set the class attributes and implement the methods.

    Args:
        url: ``redis://host:port/0`` of the server under test.
        queue: the queue name to use.

    Class attributes (documentation that the report and docs/benchmarks.md show):
        name: short name, e.g. ``"rq"``.
        delayed: how the library holds a delayed message and makes it due.
        ack: what "ack" means for it (how a finished message leaves Redis).
        single_api / batch_api: the public calls used to enqueue one / many messages.
        consumer: the consumer used and its settings.
    """

    name: ClassVar[str] = "?"
    delayed: ClassVar[str] = ""
    ack: ClassVar[str] = ""
    single_api: ClassVar[str] = ""
    batch_api: ClassVar[str] = ""
    consumer: ClassVar[str] = ""

    def __init__(self, url: str, queue: str = "bench") -> None:
        self.url = url
        self.queue = queue

    def close(self) -> None:
        """Release clients and event loops (the adapter is unusable afterwards)."""

    def enqueue(self, batch: Sequence[Item], batched: bool, chunk: int | None = None) -> None:
        """Enqueue every item so it is delivered at ``item.due_ms``.

        Args:
            batch: the items (``item.body`` is what the consumer receives).
            batched: use the library's fastest bulk API (True) or one call per message (False).
            chunk: messages per bulk call (default: the adapter's BATCH, 500).

        Raises:
            NotSupported: no such public API (e.g. no bulk enqueue).
        """
        raise NotImplementedError

    def consume(self, on_batch: OnBatch, stop: threading.Event) -> None:
        """Run the library's consumer in this process until ``stop`` is set (best effort).

        Every delivered message body goes to ``on_batch`` (which does no work beyond counting
        and timing) and is then acknowledged the way the library does it. The caller may kill
        the process instead of waiting for this to return.
        """
        raise NotImplementedError

    def due_offset_ms(self, batch: Sequence[Item]) -> float | None:
        """Median of (due time the queue recorded - ``item.due_ms``), ms, for enqueued items.

        None for libraries that store the due time the producer computed (no offset).
        """
        return None

    def abort(self) -> None:
        """Called from another thread just before the consumer process exits: stop anything
        the library started outside this process (e.g. a forked scheduler)."""

    def waiting(self) -> int:
        """How many messages wait in Redis (ready or delayed), through the library's API."""
        raise NotImplementedError


class AsyncAdapter(Adapter):
    """An adapter for an asyncio library (dynoqueue.asyncio, bullmq, saq): it owns one event
    loop, opens the library's queue object on it, and runs the library's coroutines there.

    Subclasses implement :meth:`_open`, :meth:`_close_queue`, :meth:`_enqueue_one` and
    :meth:`_enqueue_bulk`, and set ``batch`` (messages per bulk call).
    """

    batch: ClassVar[int] = 500

    def __init__(self, url: str, queue: str = "bench") -> None:
        super().__init__(url, queue)
        self.loop = asyncio.new_event_loop()
        self.q: Any = self.run(self._open())

    def run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        """Run ``coroutine`` to completion on this adapter's loop and return its result."""
        return self.loop.run_until_complete(coroutine)

    async def _open(self) -> Any:
        """Create (and connect) the library's queue object."""
        raise NotImplementedError

    async def _close_queue(self) -> None:
        """Close the library's queue object."""
        raise NotImplementedError

    async def _enqueue_one(self, item: Item) -> None:
        """Enqueue one item with the library's one-message call."""
        raise NotImplementedError

    async def _enqueue_bulk(self, items: Sequence[Item]) -> None:
        """Enqueue ``items`` (at most one bulk call's worth) with the library's bulk path."""
        raise NotImplementedError

    async def _enqueue(self, batch: Sequence[Item], batched: bool, size: int) -> None:
        if not batched:
            for item in batch:
                await self._enqueue_one(item)
            return
        for i in range(0, len(batch), size):
            await self._enqueue_bulk(batch[i:i + size])

    async def _enqueue_concurrently(self, batch: Sequence[Item], tasks: int) -> None:
        async def producer(first: int) -> None:
            for item in batch[first::tasks]:
                await self._enqueue_one(item)

        await asyncio.gather(*(producer(k) for k in range(min(tasks, len(batch)))))

    def close(self) -> None:
        """Close the queue object, then the event loop."""
        self.run(self._close_queue())
        self.loop.close()

    def enqueue(self, batch: Sequence[Item], batched: bool, chunk: int | None = None) -> None:
        """See :meth:`Adapter.enqueue`; bulk calls carry ``chunk`` (default ``batch``)."""
        self.run(self._enqueue(batch, batched, chunk or self.batch))

    def enqueue_concurrently(self, batch: Sequence[Item], tasks: int) -> None:
        """Enqueue every item one call per message from ``tasks`` tasks on this adapter's loop.

        Task ``k`` enqueues items ``k, k + tasks, k + 2 * tasks, ...`` one after the other, so
        up to ``tasks`` calls are in flight at once (how an asyncio service produces: many
        request handlers, each enqueuing its own message).

        Args:
            batch: the items. tasks: how many producer tasks, >= 1.
        """
        self.run(self._enqueue_concurrently(batch, tasks))
