"""huey through its public API: task() / task.schedule(), the thread Consumer."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from huey import RedisHuey

from ..common import Item, now_ms
from .base import Adapter, NotSupported, OnBatch

#: Worker threads of the consumer (huey's default is 1).
WORKERS = 1
_HOOK: list[OnBatch] = []


def _noop(body: str) -> None:
    if _HOOK:
        _HOOK[0]([body])


class HueyAdapter(Adapter):
    """huey: ``schedule(eta=...)``; a dequeued task is removed from Redis (no ack)."""

    name = "huey"
    delayed = ("a scheduled task is enqueued to the list like any other; the worker that "
               "dequeues it early parks it in a schedule zset, and the consumer's scheduler "
               "moves due tasks back every 1 s")
    ack = ("none: a dequeue (BRPOP) removes the task from Redis, so a consumer crash loses "
           "it (at-most-once)")
    single_api = "task.schedule(args=(body,), eta=when) (task(body) when due now)"
    batch_api = "n/a"
    consumer = f"huey.create_consumer(workers={WORKERS}, worker_type='thread')"

    def __init__(self, url: str, queue: str = "bench") -> None:
        super().__init__(url, queue)
        self.huey: Any = RedisHuey(queue, url=url, results=False)
        self.task: Any = self.huey.task(name="noop")(_noop)

    def close(self) -> None:
        """Close the storage's connection pool."""
        self.huey.storage.close()

    def enqueue(self, batch: Sequence[Item], batched: bool, chunk: int | None = None) -> None:
        """One ``schedule`` (or plain call) per message; no bulk API."""
        if batched:
            raise NotSupported("no bulk enqueue API (one enqueue per task)")
        for item in batch:
            if item.due_ms > now_ms():
                when = datetime.fromtimestamp(item.due_ms / 1000, tz=UTC)
                self.task.schedule(args=(item.body,), eta=when)
            else:
                self.task(item.body)

    def consume(self, on_batch: OnBatch, stop: threading.Event) -> None:
        """Start the consumer (threads) and wait for ``stop``."""
        _HOOK[:] = [on_batch]
        consumer = self.huey.create_consumer(workers=WORKERS, worker_type="thread")
        consumer.start()
        stop.wait()
        consumer.stop()

    def waiting(self) -> int:
        """Tasks in the queue plus tasks parked in the schedule."""
        return int(self.huey.pending_count()) + int(self.huey.scheduled_count())
