"""Core throughput and delivery lateness of dynoqueue, against raw Redis on the same server.

Run: ``.venv/bin/python -m benchmarks.core_throughput [--messages N] [--runs R]``. Starts its own
redis-server (``dynoqueue.embedded``) and prints one table of medians over the runs. The "raw
Redis" row pipelines the bare HSET + ZADD that a push needs, so the "vs raw" column shows a rate
as a fraction of what Redis itself does with the same commands. Comparisons with peer libraries
belong to the full benchmark suite.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from dynoqueue import DynoQueue, Message, RedisQueues, SingleShardSupplier
from dynoqueue.embedded import single
from dynoqueue.model.partitions import partition_keys, partition_of

BATCH = 500
SINGLE_PUSHES = 5000


def _rate(n: int, fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return n / (time.perf_counter() - started)


def _push_batched(q: DynoQueue, messages: list[Message]) -> None:
    for i in range(0, len(messages), BATCH):
        q.push(messages[i:i + BATCH])


def pop_ack_all(q: DynoQueue, batch: int = BATCH) -> int:
    """Pop ``batch`` at a time and ack each batch until the queue has nothing due; how many
    were acked."""
    done = 0
    while got := q.pop(batch):
        done += q.ack_many(got)
    return done


def _raw_push(client: Any, prefix: str, messages: list[Message]) -> None:
    for i in range(0, len(messages), BATCH):
        pipe = client.pipeline(transaction=False)
        for m in messages[i:i + BATCH]:
            pipe.hset(f"{prefix}.raw.h", m.id, m.to_json())
            pipe.zadd(f"{prefix}.raw.z", {m.id: 1.0})
        pipe.execute()


def waiting_pop_lateness(q: DynoQueue, client: Any, partitions: int = 1) -> list[float]:
    """1000 messages due over 2 s, one consumer that takes what is due and otherwise waits;
    each one's lateness = receive time - due time, ms. ``partitions``: the queue's
    (QueuePolicy.partitions), to find each message's score."""
    count, spread_ms = 1000, 2000
    q.push([Message(f"d{i}", timeout=200 + i * spread_ms // count) for i in range(count)])
    # The real due time is the score's whole milliseconds (server clock, this same machine).
    layout = partition_keys(q.keys, partitions)
    pipe = client.pipeline(transaction=False)
    for i in range(count):
        pipe.zscore(layout[partition_of(f"d{i}", partitions)].queue_shard(q.local_shard),
                    f"d{i}")
    due = {f"d{i}": float(int(score)) for i, score in enumerate(pipe.execute())}
    lateness: list[float] = []

    def consume() -> None:
        while len(lateness) < count:
            # Take what is due without waiting; only an idle consumer waits, for one message.
            batch = q.pop(100) or q.pop(1, wait_ms=500)
            now = time.time() * 1000
            lateness.extend(now - due[m.id] for m in batch)
            q.ack_many(batch)

    worker = threading.Thread(target=consume)
    worker.start()
    worker.join(timeout=30)
    return lateness


def one_run(client: Any, n: int) -> dict[str, float]:
    """Every measure once, on fresh keys; rates in messages/s, lateness in ms."""
    prefix = f"bench{uuid.uuid4().hex[:6]}"
    out: dict[str, float] = {}
    with RedisQueues(client, client, key_prefix=prefix, shard_supplier=SingleShardSupplier("s"),
                     unack_handler_interval_ms=0) as queues:
        q = queues.get("q")
        messages = [Message(f"m{i}", "x" * 32, timeout=i % 1000) for i in range(n)]
        out["push, batches of 500"] = _rate(n, lambda: _push_batched(q, messages))
        time.sleep(1.0)  # every delay has passed
        out["pop + ack, batches of 500"] = _rate(n, lambda: pop_ack_all(q))
        single_n = min(n, SINGLE_PUSHES)
        out["push, one message per call"] = _rate(
            single_n, lambda: [q.push([m]) for m in messages[:single_n]])
        q.clear()
        out["raw Redis HSET+ZADD, pipelined"] = _rate(
            n, lambda: _raw_push(client, prefix, messages))
        client.delete(f"{prefix}.raw.h", f"{prefix}.raw.z")
        cuts = statistics.quantiles(waiting_pop_lateness(q, client), n=100)
        p50, p99 = cuts[49], cuts[98]
        out["waiting pop lateness p50 (ms)"] = p50
        out["waiting pop lateness p99 (ms)"] = p99
        q.clear()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="dynoqueue core throughput and lateness")
    parser.add_argument("--messages", type=int, default=50_000, help="messages per run")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    results: dict[str, list[float]] = {}
    with single() as server:
        client = server.client()
        for _ in range(args.runs):
            for name, value in one_run(client, args.messages).items():
                results.setdefault(name, []).append(value)
    raw = statistics.median(results["raw Redis HSET+ZADD, pipelined"])
    print(f"{'measure':<34} {'median':>12} {'min':>12} {'max':>12} {'vs raw':>8}")
    for name, values in results.items():
        med = statistics.median(values)
        ratio = "" if "lateness" in name else f"{med / raw:.2f}"
        print(f"{name:<34} {med:>12,.1f} {min(values):>12,.1f} {max(values):>12,.1f} {ratio:>8}")
    print("rates in messages/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
