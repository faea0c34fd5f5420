"""Partitioned queues (``QueuePolicy(partitions=n)``): what partitions cost on one server and
how they spread the load over a cluster's primaries, ratios in one run.

    python -m benchmarks.partitions [--rounds 3] [--messages 20000] [--spark-rows 1000000]

* **No tax when not needed** (one redis-server): batched push (100 a call, then 500) and pop +
  ack_many of the same backlog, ``partitions=1`` vs ``8``, in alternating rounds (a load change
  hits both alike); the ratio of the medians. Also the client CPU per message, and the
  lateness of 1,000 messages due over 2 s through a waiting pop.
* **Load spreads** (3 primaries, no replicas): the same workload with ``partitions=1`` and
  ``12``; each primary's share of the server time (``INFO commandstats`` usec), and the server
  usec and round trips per message, the figures docs/benchmarks.md projects from.
* **Backlog grows** (3 primaries of 24 MB each, noeviction): messages acknowledged before the
  first out-of-memory error, ``partitions=1`` vs ``12``, and how many are found afterwards
  (none of the acknowledged may be lost).

* **Spark** (``--spark-rows N``, 3 primaries): a local Spark writes N rows into ``partitions=1``
  and ``12``; the write time, and the batch read's planned tasks and rows.

Every figure is printed per primary, so anyone with a bigger machine can check the model.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis
from rich.console import Console
from rich.table import Table

from dynoqueue import Message, QueuePolicy, RedisQueues, SingleShardSupplier
from dynoqueue.embedded import RedisServer, cluster
from dynoqueue.errors import RedisOperationError

from .core_throughput import pop_ack_all, waiting_pop_lateness

BATCH = 100


def _server_usec(clients: list[Any]) -> list[float]:
    """Each server's total command usec (INFO commandstats)."""
    return [sum(float(v["usec"]) for v in c.info("commandstats").values()) for c in clients]


def _calls(clients: list[Any]) -> list[int]:
    return [sum(int(v["calls"]) for v in c.info("commandstats").values()) for c in clients]


def _run(queues: RedisQueues, partitions: int, messages: int,
         admins: list[Any], batch: int = BATCH) -> dict[str, Any]:
    """Push ``messages`` in batches, then pop + ack them in batches; the rates and the
    servers' figures."""
    q = queues.get(f"bench-{uuid.uuid4().hex[:8]}", QueuePolicy(partitions=partitions))
    q.push([Message("warm", "x")])
    q.ack_many(q.pop(1))
    payload = "x" * 100
    ids = [f"m{i}" for i in range(messages)]
    for admin in admins:
        admin.config_resetstat()
    cpu, started = time.process_time(), time.perf_counter()
    for i in range(0, messages, batch):
        q.push([Message(id, payload) for id in ids[i:i + batch]])
    push_s, push_cpu = time.perf_counter() - started, time.process_time() - cpu
    push_usec, push_calls = _server_usec(admins), _calls(admins)
    cpu, started = time.process_time(), time.perf_counter()
    done = pop_ack_all(q, batch)
    pop_s, pop_cpu = time.perf_counter() - started, time.process_time() - cpu
    usec = _server_usec(admins)
    calls = _calls(admins)
    q.clear()
    return {"push_rate": messages / push_s, "pop_rate": done / pop_s,
            "push_cpu_us": push_cpu / messages * 1e6, "pop_cpu_us": pop_cpu / messages * 1e6,
            "usec": usec, "usec_per_msg": sum(usec) / messages,
            "push_server_us": sum(push_usec) / messages,
            "push_calls": sum(push_calls) / (messages / batch),
            "calls": sum(calls), "done": done}


def _rounds(rounds: int, make: Callable[[int], dict[str, Any]],
            counts: tuple[int, int]) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {c: [] for c in counts}
    for r in range(rounds):
        for c in (counts if r % 2 == 0 else counts[::-1]):
            out[c].append(make(c))
    return out


def one_server(rounds: int, messages: int, console: Console, batch: int = BATCH) -> None:
    with RedisServer() as server:
        admin = server.client()
        client = redis.Redis.from_url(server.url)
        with RedisQueues(client, client, key_prefix="pbench", unack_handler_interval_ms=0,
                         shard_supplier=SingleShardSupplier("a")) as queues:
            results = _rounds(rounds, lambda c: _run(queues, c, messages, [admin], batch),
                              (1, 8))
        client.close()
        admin.close()
    table = Table(title=f"One redis-server: partitions=1 vs 8 ({messages:,} messages, "
                        f"batches of {batch}, {rounds} rounds, medians)")
    for col in ("partitions", "push msg/s", "pop+ack msg/s", "client CPU push µs/msg",
                "client CPU pop+ack µs/msg", "server push µs/msg", "server µs/msg"):
        table.add_column(col, justify="right")
    med: dict[int, dict[str, float]] = {}
    for c, rows in results.items():
        med[c] = {k: statistics.median(r[k] for r in rows)
                  for k in ("push_rate", "pop_rate", "push_cpu_us", "pop_cpu_us",
                            "push_server_us", "usec_per_msg")}
        m = med[c]
        table.add_row(str(c), f"{m['push_rate']:,.0f}", f"{m['pop_rate']:,.0f}",
                      f"{m['push_cpu_us']:.1f}", f"{m['pop_cpu_us']:.1f}",
                      f"{m['push_server_us']:.1f}", f"{m['usec_per_msg']:.1f}")
    table.add_row("ratio 8/1", f"{med[8]['push_rate'] / med[1]['push_rate']:.2f}x",
                  f"{med[8]['pop_rate'] / med[1]['pop_rate']:.2f}x", "", "", "", "")
    console.print(table)


def lateness(rounds: int, console: Console) -> None:
    """Lateness through a waiting pop on one server, ``partitions=1`` vs ``8``."""
    got: dict[int, list[float]] = {1: [], 8: []}
    with RedisServer() as server:
        client = redis.Redis.from_url(server.url)
        with RedisQueues(client, client, key_prefix="plate", unack_handler_interval_ms=0,
                         shard_supplier=SingleShardSupplier("a")) as queues:
            for r in range(rounds):
                for c in ((1, 8) if r % 2 == 0 else (8, 1)):
                    q = queues.get(f"late-{c}-{r}", QueuePolicy(partitions=c))
                    got[c] += waiting_pop_lateness(q, client, c)
        client.close()
    table = Table(title=f"One redis-server: lateness through a waiting pop, ms ({rounds} x "
                        "1,000 messages due over 2 s, one consumer)")
    for col in ("partitions", "p50", "p99", "max"):
        table.add_column(col, justify="right")
    for c, values in got.items():
        cuts = statistics.quantiles(values, n=100)
        table.add_row(str(c), f"{cuts[49]:.2f}", f"{cuts[98]:.2f}", f"{max(values):.2f}")
    console.print(table)


def three_primaries(messages: int, console: Console) -> None:
    with cluster(primaries=3, replicas_per_primary=0) as topology:
        admins = [s.client() for s in topology.servers()]
        client = topology.client()
        with RedisQueues(client, client, key_prefix="pbench", unack_handler_interval_ms=0,
                         shard_supplier=SingleShardSupplier("a")) as queues:
            rows = {c: _run(queues, c, messages, admins) for c in (1, 12)}
        client.close()
        ports = [s.port for s in topology.servers()]
        for a in admins:
            a.close()
    table = Table(title=f"3 primaries: each primary's share of the server time "
                        f"(batched push + pop + ack of {messages:,} messages)")
    for col in ("partitions", *(f"primary :{p}" for p in ports), "server µs/msg",
                "push msg/s", "pop+ack msg/s"):
        table.add_column(col, justify="right")
    for c, r in rows.items():
        total = sum(r["usec"]) or 1.0
        table.add_row(str(c), *(f"{u / total:.2f} ({u / messages:.1f} µs/msg)"
                                for u in r["usec"]),
                      f"{r['usec_per_msg']:.1f}", f"{r['push_rate']:,.0f}",
                      f"{r['pop_rate']:,.0f}")
    console.print(table)


def _fill(queues: RedisQueues, partitions: int) -> tuple[int, int, str]:
    """Push batches until the first out-of-memory error; (messages acknowledged, messages
    found afterwards, the error)."""
    q = queues.get(f"backlog-{partitions}", QueuePolicy(partitions=partitions))
    payload = "x" * 200
    acked = 0
    error = ""
    while True:
        try:
            acked += len(q.push([Message(f"m{acked + i}", payload) for i in range(500)]))
        except RedisOperationError as exc:
            error = str(exc)
            break
    found = q.size()
    q.clear()
    return acked, found, error


def backlog(console: Console, maxmemory_mb: int = 24) -> None:
    """How many messages wait before the first typed out-of-memory error, on 3 primaries of
    ``maxmemory_mb`` each (noeviction)."""
    args = ["--maxmemory", f"{maxmemory_mb}mb", "--maxmemory-policy", "noeviction"]
    rows = {}
    for partitions in (1, 12):
        with cluster(primaries=3, replicas_per_primary=0, extra_args=args) as topology:
            client = topology.client()
            with RedisQueues(client, client, key_prefix="pbench", unack_handler_interval_ms=0,
                             shard_supplier=SingleShardSupplier("a")) as queues:
                rows[partitions] = _fill(queues, partitions)
            client.close()
    table = Table(title=f"Backlog on 3 primaries of {maxmemory_mb} MB each (noeviction): "
                        f"waiting messages (200-byte payloads) before the first out-of-memory "
                        f"error")
    for col in ("partitions", "acknowledged", "found after", "ratio to 1", "the error"):
        table.add_column(col, justify="right")
    for partitions, (acked, found, error) in rows.items():
        table.add_row(str(partitions), f"{acked:,}", f"{found:,}",
                      f"{acked / rows[1][0]:.2f}x", error[:60])
    console.print(table)


def spark_write(console: Console, rows: int = 1_000_000) -> None:
    """Spark writes ``rows`` rows into a queue on 3 primaries, ``partitions=1`` vs ``12``
    (write option ``partitions``), then reads it back: the write time, the read's planned
    tasks and the rows read. Local Spark (``local[2]``), the data source's default batchSize."""
    from dynoqueue.spark.session import local_session

    spark = local_session("dynoqueue-partitions-bench")
    frame = spark.range(rows).selectExpr("concat('m', id) AS id", "'x' AS payload").cache()
    frame.count()  # the rows exist before the clock starts
    table = Table(title=f"Spark on 3 primaries: writing {rows:,} rows, then reading them")
    for col in ("partitions", "write s", "rows/s", "read tasks", "rows read", "read s"):
        table.add_column(col, justify="right")
    with cluster(primaries=3, replicas_per_primary=0) as topology:
        for partitions in (1, 12):
            options = {"url": topology.url, "queue": f"spark-{partitions}",
                       "keyPrefix": "pbench", "partitions": str(partitions)}
            started = time.perf_counter()
            frame.write.format("dynoqueue").options(**options).mode("append").save()
            wrote = time.perf_counter() - started
            started = time.perf_counter()
            read = spark.read.format("dynoqueue").options(**options).load()
            tasks = read.rdd.getNumPartitions()
            count = read.count()
            table.add_row(str(partitions), f"{wrote:.1f}", f"{rows / wrote:,.0f}", str(tasks),
                          f"{count:,}", f"{time.perf_counter() - started:.1f}")
    frame.unpersist()
    console.print(table)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--spark-rows", type=int, default=0, metavar="N",
                        help="also write N rows with Spark into 1 and 12 partitions (needs "
                             "the spark extra; the issue's row: 1000000)")
    args = parser.parse_args(argv)
    console = Console()
    # A partition a call touches costs a script call (~9 us of server, ~4 us of client): at
    # 100 a call each of 8 partitions gets ~12, at 500 (one script call's most) ~62.
    for batch in (BATCH, 500):
        one_server(args.rounds, args.messages, console, batch)
    lateness(args.rounds, console)
    three_primaries(args.messages, console)
    backlog(console)
    if args.spark_rows:
        spark_write(console, args.spark_rows)


if __name__ == "__main__":
    main()
