"""rq (Redis Queue) through its public API: Queue.enqueue_at / enqueue_many, SimpleWorker."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import redis
from rq import Queue, SimpleWorker
from rq.registry import ScheduledJobRegistry, StartedJobRegistry

from ..common import Item, now_ms
from .base import Adapter, OnBatch

BATCH = 500
_HOOK: list[OnBatch] = []


def noop(body: str) -> None:
    """The job function: hands the body to the benchmark's callback, does no work."""
    if _HOOK:
        _HOOK[0]([body])


class RqAdapter(Adapter):
    """rq: delayed jobs via ``enqueue_at`` into the ScheduledJobRegistry; ``result_ttl=0``."""

    name = "rq"
    delayed = ("enqueue_at puts the job in ScheduledJobRegistry (a zset scored in whole "
               "seconds, so a job can be moved up to 1 s early); the worker's scheduler "
               "process moves due jobs to the queue list every 1 s")
    ack = ("the worker finishes the job: removed from StartedJobRegistry; result_ttl=0 "
           "deletes the job hash at once")
    single_api = "queue.enqueue_at(when, noop, body, result_ttl=0) (enqueue() when due now)"
    batch_api = (f"enqueue_at(..., pipeline=pipe) x {BATCH} then pipe.execute() "
                 "(enqueue_many has no delay option; used when due now)")
    consumer = "SimpleWorker (no fork per job), work(with_scheduler=True)"

    def __init__(self, url: str, queue: str = "bench") -> None:
        super().__init__(url, queue)
        self.conn: Any = redis.Redis.from_url(url)
        self.q = Queue(queue, connection=self.conn)
        self._worker: Any = None

    def close(self) -> None:
        """Close the client."""
        self.conn.close()

    @staticmethod
    def _when(item: Item) -> datetime:
        return datetime.fromtimestamp(item.due_ms / 1000, tz=UTC)

    def enqueue(self, batch: Sequence[Item], batched: bool, chunk: int | None = None) -> None:
        """Scheduled jobs for future items; plain jobs (enqueue / enqueue_many) for due ones."""
        now = now_ms()
        if not batched:
            for item in batch:
                if item.due_ms > now:
                    self.q.enqueue_at(self._when(item), noop, item.body, result_ttl=0)
                else:
                    self.q.enqueue(noop, item.body, result_ttl=0)
            return
        size = chunk or BATCH
        for i in range(0, len(batch), size):
            part = batch[i:i + size]
            if all(item.due_ms <= now for item in part):
                self.q.enqueue_many([Queue.prepare_data(noop, (item.body,), result_ttl=0)
                                     for item in part])
                continue
            with self.conn.pipeline() as pipe:
                for item in part:
                    self.q.enqueue_at(self._when(item), noop, item.body, result_ttl=0,
                                      pipeline=pipe)
                pipe.execute()

    def consume(self, on_batch: OnBatch, stop: threading.Event) -> None:
        """Run a SimpleWorker with its scheduler in this (main) thread."""
        _HOOK[:] = [on_batch]
        self._worker = SimpleWorker([self.q], connection=self.conn)
        self._worker.work(burst=False, with_scheduler=True, logging_level="WARNING")

    def abort(self) -> None:
        """Stop the scheduler process the worker forked (before this process exits)."""
        worker = self._worker
        if worker is not None and getattr(worker, "scheduler", None) is not None:
            process = worker.scheduler._process
            if process is not None and process.is_alive():
                process.kill()
                process.join(5)

    def waiting(self) -> int:
        """Queued, scheduled and started (running, not yet finished) jobs."""
        return (int(self.q.count) + int(ScheduledJobRegistry(queue=self.q).count)
                + int(StartedJobRegistry(queue=self.q).count))
