"""Concurrent consumers and producers on one real server: no duplicate without a lease expiry."""

from __future__ import annotations

import threading
from collections import Counter

from dynoqueue import Message, SingleShardSupplier

from .conftest import unique


def test_concurrent_consumers_never_share_a_message(make_queues) -> None:
    name = unique()
    producer_queues = make_queues(shard_supplier=SingleShardSupplier("s"))
    producer = producer_queues.get(name)
    total = 3000
    delivered: Counter[str] = Counter()
    lock = threading.Lock()
    done = threading.Event()

    def produce() -> None:
        for start in range(0, total, 100):
            producer.push([Message(f"m{i}", str(i)) for i in range(start, start + 100)])

    def consume() -> None:
        # Each consumer has its own factory and connection, like separate processes.
        q = make_queues(key_prefix=producer_queues.key_prefix,
                        shard_supplier=SingleShardSupplier("s")).get(name)
        while not done.is_set():
            batch = q.pop(37, wait_ms=100)
            with lock:
                delivered.update(m.id for m in batch)
                if sum(delivered.values()) >= total:
                    done.set()
            q.ack_many(batch)

    consumers = [threading.Thread(target=consume) for _ in range(4)]
    for t in consumers:
        t.start()
    produce()
    for t in consumers:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in consumers)
    assert len(delivered) == total
    assert max(delivered.values()) == 1  # leases of 60 s never expired: no duplicates
    assert producer.shard_sizes() == {"s": {"size": 0, "uacked": 0}}
