"""A/B of the consumer paths of two dynoqueue trees, in interleaved rounds on one redis-server.

Run: ``python -m benchmarks.consumer_ab --base /tmp/base [--new .] [--rounds 5] [--messages N]``
where ``--base`` is a directory holding another ``dynoqueue`` package (e.g. ``git archive
<commit> dynoqueue | tar -x -C /tmp/base``). Each round runs, for each tree in turn, one fresh
process that drains ``N`` due messages three ways, back to back:

* ``sync``: the sync consumer loop, ``pop(500)`` + ``ack_many`` (the "batched pop+ack" of
  tables 2 and 8);
* ``async``: the same loop in one asyncio task (``await pop(500)`` / ``await ack_many``);
* ``worker``: ``dynoqueue.asyncio.Worker(queue, no-op handler, concurrency=16)``, timed from
  its start until the queue holds nothing waiting or leased (the last ack), as table 8 times it
  (``--worker-sync`` adds the sync ``Worker(concurrency=1)``).

It prints, per tree, the medians over the rounds of msgs/s, process CPU us/msg
(``time.process_time``; and its minimum) and Redis script time us/msg (``INFO commandstats``,
evalsha), and the ratios ``async / sync`` and ``worker / sync`` taken within each process (so
within seconds of each other): on a shared machine the ratios and CPU figures are the ones to
compare.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

#: The child: measures one tree (its dynoqueue is first on sys.path) and prints JSON.
CHILD = r'''
import asyncio, gc, json, sys, time, threading
import redis, redis.asyncio
from dynoqueue import Message, SingleShardSupplier, RedisQueues as SyncQueues, Worker as SyncWorker
from dynoqueue.asyncio import RedisQueues, Worker

url, n, modes = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
admin = redis.Redis.from_url(url)

def script_us():
    return admin.info("commandstats").get("cmdstat_evalsha", {}).get("usec", 0)

def sync_queues():
    client = redis.Redis.from_url(url)
    return client, SyncQueues(client, client, key_prefix="ab", unack_handler_interval_ms=0,
                              shard_supplier=SingleShardSupplier("a"))

def fill():
    admin.flushall()
    client, queues = sync_queues()
    q = queues.get("ab")
    for i in range(0, n, 500):
        q.push([Message(f"m{j}", '{"pad":"xxxxxxxxxxxxxxxxxxxxxxxx"}')
                for j in range(i, min(n, i + 500))])
    queues.close(); client.close()

def run_sync(mode):
    client, queues = sync_queues()
    q = queues.get("ab"); q.size()
    done = 0
    if mode == "sync":
        t0, c0 = time.perf_counter(), time.process_time()
        while done < n:
            got = q.pop(500)
            if got:
                q.ack_many(got); done += len(got)
    else:
        finished = threading.Event()
        def handler(m):
            nonlocal done
            done += 1
            if done >= n: finished.set()
        t0, c0 = time.perf_counter(), time.process_time()
        worker = SyncWorker(q, handler, concurrency=1)
        thread = worker.run_in_thread(); finished.wait()
        while any(s["size"] + s["uacked"] for s in q.shard_sizes().values()):
            time.sleep(0.0005)  # until the last ack
        t1, c1 = time.perf_counter(), time.process_time()
        worker.stop(); thread.join()
        queues.close(); client.close()
        return t1 - t0, c1 - c0
    t1, c1 = time.perf_counter(), time.process_time()
    queues.close(); client.close()
    return t1 - t0, c1 - c0

async def run_async(mode):
    client = redis.asyncio.Redis.from_url(url)
    queues = RedisQueues(client, client, key_prefix="ab", unack_handler_interval_ms=0,
                         shard_supplier=SingleShardSupplier("a"))
    q = queues.get("ab"); await q.size()
    done = 0
    if mode == "async":
        t0, c0 = time.perf_counter(), time.process_time()
        while done < n:
            got = await q.pop(500)
            if got:
                await q.ack_many(got); done += len(got)
    else:
        finished = asyncio.Event()
        async def handler(m):
            nonlocal done
            done += 1
            if done >= n: finished.set()
        t0, c0 = time.perf_counter(), time.process_time()
        async with Worker(q, handler, concurrency=16) as worker:
            await finished.wait()
            while any(s["size"] + s["uacked"] for s in (await q.shard_sizes()).values()):
                await asyncio.sleep(0.0005)  # until the last ack
            t1, c1 = time.perf_counter(), time.process_time()
            worker.stop()
        await queues.aclose(); await client.aclose()
        return t1 - t0, c1 - c0
    t1, c1 = time.perf_counter(), time.process_time()
    await queues.aclose(); await client.aclose()
    return t1 - t0, c1 - c0

out = {}
for mode in modes:
    mode, _, collect = mode.partition("+")
    fill()
    if collect:
        gc.collect()
    s0 = script_us()
    wall, cpu = run_sync(mode) if mode in ("sync", "worker_sync") else asyncio.run(run_async(mode))
    out[mode] = {"rate": n / wall, "cpu_us": cpu / n * 1e6, "server_us": (script_us() - s0) / n}
print(json.dumps(out))
'''


def _round(tree: str, url: str, n: int, modes: list[str]) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    proc = subprocess.run([sys.executable, "-c", CHILD, url, str(n), ",".join(modes)],
                          env=env, capture_output=True, text=True, check=True, timeout=300)
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="directory holding the A dynoqueue")
    parser.add_argument("--new", default=".", help="directory holding the B dynoqueue")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--worker-sync", action="store_true",
                        help="also measure the sync Worker(concurrency=1)")
    parser.add_argument("--gc", action="store_true",
                        help="gc.collect() before each measurement (default: as it comes)")
    args = parser.parse_args()
    modes = ["sync", "async", "worker"] + (["worker_sync"] if args.worker_sync else [])
    if args.gc:
        modes = [f"{mode}+gc" for mode in modes]
    from dynoqueue.embedded import single

    trees = {"A": args.base, "B": args.new}
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    load = os.getloadavg()[0]
    with single(extra_args=["--save", "", "--appendonly", "no"]) as server:
        for i in range(args.rounds):
            order = list(trees) if i % 2 == 0 else list(reversed(trees))
            for name in order:
                results[name].append(_round(trees[name], server.url, args.messages, modes))
            print(f"round {i + 1}/{args.rounds} done", file=sys.stderr)
    print(f"{args.rounds} rounds of {args.messages:,} messages; load average "
          f"{load:.1f} before, {os.getloadavg()[0]:.1f} after; medians [min-max]")
    for name, tree in trees.items():
        rows = results[name]
        print(f"{name} = {tree}")
        for mode in (m.partition("+")[0] for m in modes):
            cells = []
            for key, fmt in (("rate", "{:,.0f} msgs/s"), ("cpu_us", "cpu {:.2f} us/msg"),
                             ("server_us", "server {:.2f} us/msg")):
                values = [r[mode][key] for r in rows]
                cells.append(fmt.format(statistics.median(values)))
                if key == "cpu_us":  # the least disturbed by other processes
                    cells[-1] += f" (min {min(values):.2f})"
            line = f"  {mode:12s} " + ", ".join(cells)
            if mode != "sync":
                ratios = [r[mode]["rate"] / r["sync"]["rate"] for r in rows]
                line += (f", {mode}/sync {statistics.median(ratios):.2f}x "
                         f"[{min(ratios):.2f}-{max(ratios):.2f}]")
            print(line)


if __name__ == "__main__":
    started = time.perf_counter()
    main()
    print(f"{time.perf_counter() - started:.0f} s", file=sys.stderr)
