"""dramatiq with its Redis broker, through its public API: actor.send_with_options, Worker."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from ..common import Item
from .base import Adapter, NotSupported, OnBatch

#: Worker threads (dramatiq's default).
THREADS = 8
_HOOK: list[OnBatch] = []


def _noop(body: str) -> None:
    if _HOOK:
        _HOOK[0]([body])


class DramatiqAdapter(Adapter):
    """dramatiq: ``delay`` (ms) sends to the queue's delay queue; the worker acks when done."""

    name = "dramatiq"
    delayed = ("send_with_options(delay=ms) enqueues to the '<queue>.DQ' delay queue; a "
               "worker fetches it at once and holds it in memory until due, then enqueues "
               "it to the real queue")
    ack = "the worker acks after the actor returns (Lua: drop from the ack set and msgs hash)"
    single_api = "actor.send_with_options(args=(body,), delay=ms)"
    batch_api = "n/a"
    consumer = f"dramatiq.Worker(broker, worker_threads={THREADS})"

    def __init__(self, url: str, queue: str = "bench") -> None:
        super().__init__(url, queue)
        self.broker: Any = RedisBroker(url=url)
        dramatiq.set_broker(self.broker)
        self.actor: Any = dramatiq.actor(_noop, actor_name="noop", queue_name=queue,
                                         broker=self.broker, max_retries=0)

    def close(self) -> None:
        """Close the broker."""
        self.broker.close()

    def enqueue(self, batch: Sequence[Item], batched: bool, chunk: int | None = None) -> None:
        """One ``send_with_options`` per message (one Lua call each); no bulk API."""
        if batched:
            raise NotSupported("no bulk enqueue API (each send is one Lua call; group() "
                               "sends them one by one)")
        for item in batch:
            delay = item.delay_ms()
            self.actor.send_with_options(args=(item.body,), delay=delay or None)

    def consume(self, on_batch: OnBatch, stop: threading.Event) -> None:
        """Start a Worker and wait for ``stop``."""
        _HOOK[:] = [on_batch]
        worker = dramatiq.Worker(self.broker, worker_threads=THREADS)
        worker.start()
        stop.wait()
        worker.stop(timeout=1000)

    def waiting(self) -> int:
        """Messages stored for the queue and its delay queue (the broker's message hashes)."""
        client = self.broker.client
        ns = self.broker.namespace
        return int(client.hlen(f"{ns}:{self.queue}.msgs")
                   + client.hlen(f"{ns}:{self.queue}.DQ.msgs"))
