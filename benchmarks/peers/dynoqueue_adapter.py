"""dynoqueue through its public API (RedisQueues / DynoQueue), one shard on one server."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import redis

from dynoqueue import Message, QueuePolicy, RedisQueues, SingleShardSupplier, Worker

from ..common import Item
from .base import Adapter, OnBatch

#: Messages per push / pop call in the batched modes (dynoqueue's own script batch size).
BATCH = 500
#: How long an idle consumer's pop waits (ms); the doorbell wakes it earlier.
IDLE_WAIT_MS = 5000


class DynoqueueAdapter(Adapter):
    """dynoqueue: push with ``timeout`` (ms), pop leases, ``ack_many`` deletes.

    Args:
        url, queue: as for :class:`Adapter`.
        consume_batch: messages per pop (and per ack_many) in :meth:`consume`; 1 = one message
            per pop and per ack.
        worker: 0 (default): :meth:`consume` is the pop/ack loop above; n >= 1: it runs a
            :class:`dynoqueue.Worker` with ``concurrency=n`` and a no-op handler instead.
        policy: the queue's policy (None: whatever is stored, by default dyno-queues').
    """

    name = "dynoqueue"
    delayed = ("message id in a per-shard zset scored by due ms (server clock); a pop claims "
               "only due ids; waiting pops sleep until a pub/sub doorbell or the next due time")
    ack = "ack / ack_many: ZREM from the unack zset + HDEL payload, one script per call"
    single_api = "queue.push([Message(id, body, timeout=delay_ms)])"
    batch_api = f"queue.push(messages), {BATCH} per call, each Message(..., due_at_ms=due)"
    consumer = (f"one thread: pop({BATCH}) or pop(1, wait_ms={IDLE_WAIT_MS}), then "
                "ack_many(batch)")

    def __init__(self, url: str, queue: str = "bench", consume_batch: int = BATCH,
                 worker: int = 0, policy: QueuePolicy | None = None) -> None:
        super().__init__(url, queue)
        self.consume_batch = consume_batch
        self.worker = worker
        self.client: Any = redis.Redis.from_url(url)
        self.queues = RedisQueues(self.client, self.client, key_prefix="bench",
                                  shard_supplier=SingleShardSupplier("a"),
                                  unack_handler_interval_ms=0)
        self.q = self.queues.get(queue, policy)

    def close(self) -> None:
        """Close the queue factory and the client."""
        self.queues.close()
        self.client.close()

    def enqueue(self, batch: Sequence[Item], batched: bool, chunk: int | None = None) -> None:
        """Push the items in batches of BATCH, each due at its own due time (``due_at_ms``,
        stamped on the client as the peers' are), or one by one with ``timeout`` = ms until
        due (the one-message call as dyno-queues users make it)."""
        if batched:
            size = chunk or BATCH
            for i in range(0, len(batch), size):
                self.q.push([Message(item.id, item.body, due_at_ms=item.due_at_ms())
                             for item in batch[i:i + size]])
        else:
            for item in batch:
                self.q.push([Message(item.id, item.body, timeout=item.delay_ms())])

    def consume(self, on_batch: OnBatch, stop: threading.Event) -> None:
        """Pop what is due (up to consume_batch), else wait for one; hand over; ack. With
        ``worker``: a Worker on its threads does all that until ``stop``."""
        if self.worker:
            worker = Worker(self.q, lambda m: on_batch([m.payload or ""]),
                            concurrency=self.worker)
            thread = worker.run_in_thread()
            stop.wait()
            worker.stop(immediate=True)
            thread.join(5)
            return
        q, size = self.q, self.consume_batch
        while not stop.is_set():
            got = q.pop(size) or q.pop(1, wait_ms=IDLE_WAIT_MS)
            if not got:
                continue
            on_batch([m.payload or "" for m in got])
            if size == 1:
                for m in got:
                    q.ack(m.id)
            else:
                q.ack_many(got)

    def due_offset_ms(self, batch: Sequence[Item]) -> float | None:
        """Median of (recorded due time, the zset score - the producer's due time), ms. The
        bulk enqueue stamps due times on the client (``due_at_ms``), so this is the rounding
        to whole ms only; a ``timeout`` would count from the server's clock when the push
        script runs, later by the push's own latency."""
        pipe = self.client.pipeline(transaction=False)
        sample = list(batch[:: max(1, len(batch) // 200)])
        for item in sample:
            pipe.zscore(self.q.keys.queue_shard(self.q.local_shard), item.id)
        offsets = sorted(float(score) - item.due_ms
                         for score, item in zip(pipe.execute(), sample, strict=True)
                         if score is not None)
        return offsets[len(offsets) // 2] if offsets else None

    def waiting(self) -> int:
        """Waiting plus leased messages over the queue's shards."""
        return sum(s["size"] + s["uacked"] for s in self.q.shard_sizes().values())
