"""dynoqueue's asyncio API (dynoqueue.asyncio RedisQueues / DynoQueue), set up like the sync
adapter: one shard, one redis.asyncio client for both roles, no unack reprocessor."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

import redis.asyncio

from dynoqueue import Message, SingleShardSupplier
from dynoqueue.asyncio import RedisQueues, Worker

from ..common import Item
from .base import AsyncAdapter, OnBatch
from .dynoqueue_adapter import BATCH, IDLE_WAIT_MS


class AsyncDynoqueueAdapter(AsyncAdapter):
    """dynoqueue.asyncio: the same calls as the sync adapter, awaited on one event loop.

    Args:
        url, queue: as for :class:`~benchmarks.peers.base.Adapter`.
        consume_batch: messages per pop (and per ack_many) in :meth:`consume`.
        worker: 0 (default): :meth:`consume` is the pop/ack loop; n >= 1: it runs a
            :class:`dynoqueue.asyncio.Worker` with ``concurrency=n`` and a no-op handler.
    """

    name = "dynoqueue.asyncio"
    delayed = "as dynoqueue (the same scripts and keys)"
    ack = "as dynoqueue: await ack_many(batch), one script per call"
    single_api = "await queue.push([Message(id, body, timeout=delay_ms)])"
    batch_api = f"await queue.push(messages), {BATCH} per call, each Message(..., due_at_ms=due)"
    consumer = (f"one asyncio task: await pop({BATCH}) or pop(1, wait_ms={IDLE_WAIT_MS}), "
                "then await ack_many(batch)")

    batch = BATCH

    def __init__(self, url: str, queue: str = "bench", consume_batch: int = BATCH,
                 worker: int = 0) -> None:
        self.consume_batch = consume_batch
        self.worker = worker
        self.client: Any = None
        self.queues: Any = None
        super().__init__(url, queue)

    async def _open(self) -> Any:
        self.client = redis.asyncio.Redis.from_url(self.url)
        self.queues = RedisQueues(self.client, self.client, key_prefix="bench",
                                  shard_supplier=SingleShardSupplier("a"),
                                  unack_handler_interval_ms=0)
        return self.queues.get(self.queue)

    async def _close_queue(self) -> None:
        await self.queues.aclose()
        await self.client.aclose()

    async def _enqueue_one(self, item: Item) -> None:
        await self.q.push([Message(item.id, item.body, timeout=item.delay_ms())])

    async def _enqueue_bulk(self, items: Sequence[Item]) -> None:
        await self.q.push([Message(item.id, item.body, due_at_ms=item.due_at_ms())
                           for item in items])

    def consume(self, on_batch: OnBatch, stop: threading.Event) -> None:
        """Pop what is due (up to consume_batch), else wait for one; hand over; ack."""
        self.run(self._consume(on_batch, stop))

    async def _consume(self, on_batch: OnBatch, stop: threading.Event) -> None:
        if self.worker:
            async def handler(message: Message) -> None:
                on_batch([message.payload or ""])

            worker = Worker(self.q, handler, concurrency=self.worker)
            async with worker:
                while not stop.is_set():
                    await asyncio.sleep(0.05)
                worker.stop(immediate=True)
            return
        q, size = self.q, self.consume_batch
        while not stop.is_set():
            got = await q.pop(size) or await q.pop(1, wait_ms=IDLE_WAIT_MS)
            if not got:
                continue
            on_batch([m.payload or "" for m in got])
            if size == 1:
                for m in got:
                    await q.ack(m.id)
            else:
                await q.ack_many(got)

    def waiting(self) -> int:
        """Waiting plus leased messages over the queue's shards."""
        sizes = self.run(self.q.shard_sizes())
        return sum(s["size"] + s["uacked"] for s in sizes.values())
