"""bullmq (the Python port) through its public API: Queue.add / addBulk, Worker."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

from bullmq import Queue, Worker

from ..common import Item, now_ms
from .base import AsyncAdapter, OnBatch

BATCH = 500
#: Jobs one Worker runs at once (bullmq's default is 1; more overlaps the round trips).
CONCURRENCY = 10
_JOB_OPTS = {"removeOnComplete": True, "removeOnFail": True}


class BullmqAdapter(AsyncAdapter):
    """bullmq: ``delay`` (ms) puts the job in the delayed zset; completion removes it."""

    name = "bullmq"
    delayed = ("job hash + 'delayed' zset scored by due ms; a marker key tells blocked "
               "workers when the next delayed job is due; Lua moves it to 'wait'")
    ack = ("moveToFinished (Lua) when the processor returns; removeOnComplete=True deletes "
           "the job")
    single_api = "await queue.add('noop', data, {'delay': ms, 'removeOnComplete': True})"
    batch_api = f"await queue.addBulk(jobs), {BATCH} per call"
    consumer = f"Worker(concurrency={CONCURRENCY}) in its own asyncio loop"

    batch = BATCH

    async def _open(self) -> Any:
        return Queue(self.queue, {"connection": self.url})

    async def _close_queue(self) -> None:
        await self.q.close()

    async def _enqueue_one(self, item: Item) -> None:
        await self.q.add("noop", {"b": item.body}, {**_JOB_OPTS, "delay": item.delay_ms()})

    async def _enqueue_bulk(self, items: Sequence[Item]) -> None:
        now = now_ms()
        await self.q.addBulk([
            {"name": "noop", "data": {"b": item.body},
             "opts": {**_JOB_OPTS, "delay": item.delay_ms(now)}}
            for item in items
        ])

    def consume(self, on_batch: OnBatch, stop: threading.Event) -> None:
        """Run a Worker until ``stop`` is set."""
        self.run(self._consume(on_batch, stop))

    async def _consume(self, on_batch: OnBatch, stop: threading.Event) -> None:
        async def process(job: Any, token: str) -> None:
            on_batch([job.data["b"]])

        worker = Worker(self.queue, process,
                        {"connection": self.url, "concurrency": CONCURRENCY})
        while not stop.is_set():
            await asyncio.sleep(0.05)
        await worker.close(force=True)

    def waiting(self) -> int:
        """Jobs waiting, delayed, prioritised or active."""
        counts = self.run(
            self.q.getJobCounts("wait", "delayed", "prioritized", "active", "paused"))
        return int(sum(counts.values()))
