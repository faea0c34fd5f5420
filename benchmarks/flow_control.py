"""What queue-wide limits cost when they are not reached: pop + ack of a queue with
``QueuePolicy(max_in_flight=..., rate_limit=RateLimit(...))`` against the same plain queue,
ratios in one run.

    python -m benchmarks.flow_control [--rounds 5] [--messages 20000] [--batch 100]

One redis-server, one shard, one sync client; each round fills a fresh queue of each kind with
``messages`` due messages (batched pushes, untimed), then times ``pop(batch)`` + ``ack_many``
until it is empty. The kinds alternate which goes first each round, so a change in the
machine's load hits both alike. The limits are set well above what the round reaches
(``max_in_flight`` = 10 batches, ``RateLimit(1_000_000, 1000)``), so every claim pays their
checks (the in-flight count, the rate log's trim, count and one entry per delivery) and none
is held back. Reported: msgs/s (median), the ratio to the plain queue, and the server's script
µs per message (``INFO commandstats``).
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from typing import Any

import redis
from rich.console import Console
from rich.table import Table

from dynoqueue import Message, QueuePolicy, RateLimit, RedisQueues, SingleShardSupplier
from dynoqueue.embedded import RedisServer

from .core_throughput import pop_ack_all


def _round(queues: RedisQueues, admin: Any, policy: QueuePolicy, messages: int,
           batch: int) -> tuple[float, float]:
    q = queues.get(f"flow-{uuid.uuid4().hex[:8]}", policy)
    for i in range(0, messages, 500):
        q.push([Message(f"m{j}", "x" * 100) for j in range(i, min(i + 500, messages))])
    admin.config_resetstat()
    started = time.perf_counter()
    done = pop_ack_all(q, batch)
    seconds = time.perf_counter() - started
    usec = sum(float(v["usec"]) for k, v in admin.info("commandstats").items()
               if k in ("cmdstat_evalsha", "cmdstat_eval"))
    q.clear()
    return done / seconds, usec / max(done, 1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args(argv)
    kinds = {
        "plain": QueuePolicy(),
        "limits set, not reached": QueuePolicy(max_in_flight=10 * args.batch,
                                                rate_limit=RateLimit(1_000_000, 1000)),
    }
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in kinds}
    with RedisServer() as server:
        admin = server.client()
        client = redis.Redis.from_url(server.url)
        with RedisQueues(client, client, key_prefix="flow", unack_handler_interval_ms=0,
                         shard_supplier=SingleShardSupplier("a")) as queues:
            for r in range(args.rounds):
                order = list(kinds) if r % 2 == 0 else list(kinds)[::-1]
                for name in order:
                    results[name].append(_round(queues, admin, kinds[name], args.messages,
                                                args.batch))
        client.close()
        admin.close()
    table = Table(title=f"pop({args.batch}) + ack_many of {args.messages:,} due messages, one "
                        f"server, {args.rounds} rounds (medians)")
    for col in ("queue", "msg/s", "ratio to plain", "server script µs/msg"):
        table.add_column(col, justify="right")
    plain = statistics.median(rate for rate, _ in results["plain"])
    for name, rows in results.items():
        rate = statistics.median(r for r, _ in rows)
        table.add_row(name, f"{rate:,.0f}", f"{rate / plain:.2f}x",
                      f"{statistics.median(u for _, u in rows):.2f}")
    Console().print(table)


if __name__ == "__main__":
    main()
