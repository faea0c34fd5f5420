"""saq (Simple Async Queue) through its public API: Queue.enqueue, Worker."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

from saq import Queue, Worker

from ..common import Item, now_ms
from .base import AsyncAdapter, OnBatch

BATCH = 500
#: Jobs one Worker runs at once (saq's default).
CONCURRENCY = 10
_HOOK: list[OnBatch] = []


async def noop(ctx: Any, *, b: str) -> None:
    """The job function: hands the body to the benchmark's callback, does no work."""
    if _HOOK:
        _HOOK[0]([b])


def _scheduled(item: Item, now: float) -> float:
    """saq's ``scheduled``: epoch seconds when due later, 0 (now) when already due."""
    return item.due_ms / 1000 if item.due_ms > now else 0


class SaqAdapter(AsyncAdapter):
    """saq: ``scheduled`` (epoch s) puts the job in the 'incomplete' zset; finish acks it."""

    name = "saq"
    delayed = ("job key + 'incomplete' zset scored by scheduled epoch seconds; each worker "
               "runs a Lua 'schedule' sweep every 1 s that moves due jobs to the queued list")
    ack = "queue.finish (on return): job status complete, removed from 'incomplete' (ttl kept)"
    single_api = "await queue.enqueue('noop', b=body, scheduled=due_epoch_s)"
    batch_api = (f"asyncio.gather of {BATCH} queue.enqueue calls (no bulk API; "
                 "saq pipelines concurrent calls up to its max_concurrent_ops)")
    consumer = f"Worker(concurrency={CONCURRENCY}) in its own asyncio loop"

    batch = BATCH

    async def _open(self) -> Any:
        queue = Queue.from_url(self.url, name=self.queue)
        await queue.connect()
        return queue

    async def _close_queue(self) -> None:
        await self.q.disconnect()

    async def _enqueue_one(self, item: Item) -> None:
        await self.q.enqueue("noop", b=item.body, scheduled=_scheduled(item, now_ms()))

    async def _enqueue_bulk(self, items: Sequence[Item]) -> None:
        """No bulk API: ``len(items)`` concurrent enqueues (saq pipelines them)."""
        now = now_ms()
        await asyncio.gather(*(
            self.q.enqueue("noop", b=item.body, scheduled=_scheduled(item, now))
            for item in items
        ))

    def consume(self, on_batch: OnBatch, stop: threading.Event) -> None:
        """Run a Worker until ``stop`` is set."""
        _HOOK[:] = [on_batch]
        self.run(self._consume(stop))

    async def _consume(self, stop: threading.Event) -> None:
        worker = Worker(self.q, functions=[noop], concurrency=CONCURRENCY)
        task = asyncio.ensure_future(worker.start())
        while not stop.is_set() and not task.done():
            await asyncio.sleep(0.05)
        await worker.stop()

    def waiting(self) -> int:
        """Incomplete jobs (queued, scheduled or active)."""
        return int(self.run(self.q.count("incomplete")))
