"""A deep backlog on a Redis Cluster: one partitioned queue filled to N messages and drained,
measured at depth.

    python -m benchmarks.scale [--messages 10000000] [--primaries 3] [--partitions 12]
                               [--procs 2] [--batch 500] [--replicas 1 [--kill-primary]]

Starts an embedded Cluster (no replicas, persistence off), fills one queue of ``partitions``
partitions from ``procs`` producer processes (batched pushes), then drains it with ``procs``
consumer processes (``pop(batch)`` + ``ack_many``), and prints:

- the fill and drain rates per tenth of the messages (a rate that falls with depth shows as a
  falling row; the issue's check: the last tenth at >= 0.8x the first);
- bytes per waiting message at full depth (``used_memory`` summed over the primaries, minus
  what they held before the fill);
- at full depth: the time of ``size()``, the stats read, ``peek(10)``, an unack pass with
  nothing expired and one with ``--expired`` expired leases;
- the lateness (p50/p99) of 1,000 probe messages due over 2 s through a waiting pop, on a
  second queue of the same partitions while the backlog waits (the backlog's own messages are
  all due, so a pop on its queue would take them first);
- each primary's share of the server time, and server and client µs per message (the scale
  model's inputs, docs/benchmarks.md);
- that every message came back exactly once: each consumer marks the ids it got (ids are
  ``m<index>``) in a byte map, and the parent sums the maps: lost and duplicated ids counted.

With ``--replicas R`` each primary has R replicas, every push waits for one of them
(``write_quorum=1``) and the drain is :mod:`benchmarks.scale_fault`'s (1% of the messages
delayed, a short lease, consumers that retry through errors); ``--kill-primary`` SIGKILLs a
primary once half the messages are drained and reports the failover, the messages in flight at
the kill and the duplicates, lost and early deliveries.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from dynoqueue import DynoQueueError, Message, QueuePolicy, RedisQueues, SingleShardSupplier
from dynoqueue.embedded import ClusterTopology

from .core_throughput import waiting_pop_lateness

QUEUE = "scale"
PREFIX = "scale"
PAYLOAD = "x" * 100
#: How long a write may WAIT for its replica (write_quorum=1), ms: generous, this machine is
#: busy; a push that outlasts it raises QuorumNotReachedError and is pushed again.
QUORUM_TIMEOUT_MS = 5_000
#: How long a push is retried through errors before the bench gives up, s.
PUSH_RETRY_S = 120.0


def _factory(url: str, quorum: int = 0) -> RedisQueues:
    """A factory as each process builds it: one zone, no reprocessor (the parent runs the
    unack passes it measures); ``quorum``: its ``write_quorum`` (0: none)."""
    durable: dict[str, Any] = ({"write_quorum": quorum,
                                "write_quorum_timeout_ms": QUORUM_TIMEOUT_MS} if quorum else {})
    return RedisQueues.from_url(url, key_prefix=PREFIX, unack_handler_interval_ms=0,
                                shard_supplier=SingleShardSupplier("a"),
                                read_from_replicas=False, **durable)


def push_acknowledged(q: Any, messages: list[Message]) -> None:
    """Push ``messages`` until a push returns (*acknowledged*: with a write quorum, a replica
    has them); a failed push is repeated after a short back-off (the same ids: it replaces
    whatever part of it was written)."""
    deadline = time.monotonic() + PUSH_RETRY_S
    while True:
        try:
            q.push(messages)
            return
        except DynoQueueError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _produce(url: str, partitions: int, start: int, stop: int, batch: int, quorum: int,
             go: Any, cpu: Any, slot: int) -> None:
    """Push ids ``m<start>`` .. ``m<stop - 1>`` in batches."""
    with _factory(url, quorum) as queues:
        q = queues.get(QUEUE, QueuePolicy(partitions=partitions))
        go.wait()
        began = time.process_time()
        for first in range(start, stop, batch):
            push_acknowledged(q, [Message(f"m{i}", PAYLOAD)
                                  for i in range(first, min(first + batch, stop))])
        cpu[slot] = time.process_time() - began


def _consume(url: str, partitions: int, total: int, batch: int, seen_path: str, go: Any,
             cpu: Any, slot: int) -> None:
    """Pop + ack until the queue is empty; mark each id got in a byte map written to
    ``seen_path`` (saturating at 255)."""
    seen = bytearray(total)
    with _factory(url) as queues:
        q = queues.get(QUEUE, QueuePolicy(partitions=partitions))
        go.wait()
        began = time.process_time()
        empty = 0
        while empty < 3:
            got = q.pop(batch)
            if not got:
                empty = empty + 1 if q.size() == 0 else 0
                continue
            empty = 0
            for message in got:
                index = int(message.id[1:])
                if seen[index] < 255:
                    seen[index] += 1
            q.ack_many(got)
        cpu[slot] = time.process_time() - began
    Path(seen_path).write_bytes(bytes(seen))


def _watch(q: Any, samples: list[tuple[float, int]], stop: threading.Event) -> None:
    """Sample ``q.size()`` every 0.2 s into ``samples`` (monotonic s, size) until ``stop``."""
    while not stop.is_set():
        samples.append((time.monotonic(), q.size()))
        stop.wait(0.2)
    samples.append((time.monotonic(), q.size()))


def _tenth_rates(samples: list[tuple[float, int]], total: int, filling: bool) -> list[float]:
    """Messages/s over each tenth of ``total``, from the (time, size) samples: the time at
    which the size crossed each tenth is interpolated between samples."""
    def crossing(level: float) -> float:
        for (t0, s0), (t1, s1) in itertools.pairwise(samples):
            done0 = s0 if filling else total - s0
            done1 = s1 if filling else total - s1
            if done0 <= level <= done1 and done1 > done0:
                return t0 + (t1 - t0) * (level - done0) / (done1 - done0)
        return samples[-1][0]

    marks = [crossing(total * k / 10) for k in range(11)]
    marks[0] = samples[0][0]
    return [total / 10 / max(b - a, 1e-9) for a, b in itertools.pairwise(marks)]


def _server_usec(admins: list[Any]) -> list[float]:
    return [sum(float(v["usec"]) for v in a.info("commandstats").values()) for a in admins]


def _timed(fn: Any) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1000


def _start(target: Any, args: list[tuple[Any, ...]]) -> tuple[list[Any], Any, Any]:
    """One spawned process of ``target`` per argument tuple (each gets the start event, the
    shared CPU-time array and its slot after its own arguments); started, waiting for ``go``."""
    ctx = mp.get_context("spawn")
    go, cpu = ctx.Event(), ctx.Array("d", len(args))
    workers = [ctx.Process(target=target, args=(*a, go, cpu, k)) for k, a in enumerate(args)]
    for w in workers:
        w.start()
    return workers, go, cpu


def _measured(name: str, q: Any, started: tuple[list[Any], Any, Any], admins: list[Any],
              n: int) -> dict[str, Any]:
    """Release the processes of one phase at once and time them to their end: the phase's
    seconds, rates per tenth (from ``size()`` samples), client and server µs per message, and
    each primary's share of the server time (INFO commandstats since the last reset)."""
    workers, go, cpu = started
    samples: list[tuple[float, int]] = []
    stop = threading.Event()
    watcher = threading.Thread(target=_watch, args=(q, samples, stop))
    time.sleep(1.0)  # the processes have imported and connected
    began = time.monotonic()
    watcher.start()
    go.set()
    for w in workers:
        w.join()
    seconds = time.monotonic() - began
    stop.set()
    watcher.join()
    usec = _server_usec(admins)
    return {f"{name}_s": seconds,
            f"{name}_tenths": _tenth_rates(samples, n, filling=name == "fill"),
            f"{name}_client_us": sum(cpu[:]) / n * 1e6,
            f"{name}_server_us": sum(usec) / n,
            f"{name}_share": [u / (sum(usec) or 1) for u in usec]}


def tally(paths: list[str], n: int) -> dict[str, int]:
    """Sum the consumers' byte maps: ids never delivered (lost) and delivered more than once
    (duplicated)."""
    counts = bytearray(n)
    for path in paths:
        for i, c in enumerate(Path(path).read_bytes()):
            if c:
                counts[i] = min(255, counts[i] + c)
    lost = counts.count(0)
    return {"lost": lost, "duplicated": n - lost - counts.count(1)}


def _drain(url: str, q: Any, admins: list[Any], options: argparse.Namespace) -> dict[str, Any]:
    """The drain without replicas: ``procs`` consumers until the queue is empty, measured."""
    n = options.messages
    for a in admins:
        a.config_resetstat()
    with tempfile.TemporaryDirectory(prefix="dq-scale-") as tmp:
        paths = [os.path.join(tmp, f"seen-{k}") for k in range(options.procs)]
        drain = _start(_consume, [(url, options.partitions, n, options.batch, path)
                                  for path in paths])
        out = _measured("drain", q, drain, admins, n)
        out.update(tally(paths, n))
    return out


def run(options: argparse.Namespace) -> dict[str, Any]:
    """One fill and drain; every figure of the report."""
    n, procs, partitions = options.messages, options.procs, options.partitions
    # benchmarks.cli builds its options without the fault flags.
    replicas = getattr(options, "replicas", 0)
    quorum = 1 if replicas else 0
    out: dict[str, Any] = {"messages": n, "partitions": partitions, "procs": procs,
                           "primaries": options.primaries, "batch": options.batch,
                           "replicas": replicas}
    topology = ClusterTopology(options.primaries, replicas,
                               extra_args=["--save", "", "--appendonly", "no"]).start()
    try:
        admins = [s.client() for s in topology.primaries]
        out["ports"] = [s.port for s in topology.primaries]
        with _factory(topology.url, quorum) as queues:
            q = queues.get(QUEUE, QueuePolicy(partitions=partitions))
            q.size()  # the stored policy exists before the producers start
            base_memory = sum(int(a.info("memory")["used_memory"]) for a in admins)
            for a in admins:
                a.config_resetstat()
            # Fill.
            share = -(-n // procs)
            fill = _start(_produce, [(topology.url, partitions, k * share,
                                      min(n, (k + 1) * share), options.batch, quorum)
                                     for k in range(procs)])
            out.update(_measured("fill", q, fill, admins, n))
            # At full depth.
            out["size"] = q.size()
            out["bytes_per_msg"] = (sum(int(a.info("memory")["used_memory"]) for a in admins)
                                    - base_memory) / n
            out["size_ms"] = _timed(q.size)
            out["stats_ms"] = _timed(lambda: queues.stats([QUEUE]))
            out["peek_ms"] = _timed(lambda: q.peek(10))
            out["unack_pass_ms"] = _timed(queues.process_unacks)
            expired = min(options.expired, n)
            leased = 0
            while leased < expired:
                leased += len(q.pop(min(500, expired - leased), lease_ms=1))
            time.sleep(0.05)
            out["unack_expired_ms"] = _timed(queues.process_unacks)
            out["expired"] = expired
            probe = queues.get("scale-probe", QueuePolicy(partitions=partitions))
            late = waiting_pop_lateness(probe, topology.client(), partitions)
            cuts = statistics.quantiles(late, n=100)
            out["probe_p50"], out["probe_p99"] = cuts[49], cuts[98]
            # Drain.
            if replicas:
                from . import scale_fault  # it imports this module

                out.update(scale_fault.drain(topology, queues, q, options, out["fill_s"]))
            else:
                out.update(_drain(topology.url, q, admins, options))
        for a in admins:
            a.close()
    finally:
        topology.stop()
    return out


def report(r: dict[str, Any]) -> str:
    """The figures as plain text tables (rich is an extra of the bench, not needed here)."""
    n, replicas = r["messages"], r.get("replicas", 0)
    nodes = (f"{replicas} replica{'s' if replicas > 1 else ''} each, write_quorum=1" if replicas
             else "no replicas")
    lines = [f"Scale: {n:,} messages, one queue of {r['partitions']} partitions on "
             f"{r['primaries']} primaries ({nodes}), {r['procs']} producer and "
             f"{r['procs']} consumer processes, batches of {r['batch']}", ""]
    lines.append("tenth         " + " ".join(f"{k:>8}" for k in range(1, 11)) + "   last/first")
    for name in ("fill", "drain"):
        tenths = r[f"{name}_tenths"]
        lines.append(f"{name} msg/s    " + " ".join(f"{v:>8,.0f}" for v in tenths)
                     + f"   {tenths[-1] / tenths[0]:.2f}x")
    lines += ["",
              f"fill  {r['fill_s']:.1f} s ({n / r['fill_s']:,.0f}/s), "
              f"server {r['fill_server_us']:.1f} µs/msg, client {r['fill_client_us']:.1f} "
              f"µs/msg, primaries' shares "
              + " / ".join(f"{s:.3f}" for s in r["fill_share"]),
              f"drain {r['drain_s']:.1f} s ({n / r['drain_s']:,.0f}/s), "
              + (f"server {r['drain_server_us']:.1f} µs/msg, client "
                 f"{r['drain_client_us']:.1f} µs/msg, primaries' shares "
                 + " / ".join(f"{s:.3f}" for s in r["drain_share"]) if not replicas else
                 f"client {r['drain_client_us']:.1f} µs/msg (server time not measured with "
                 f"replicas)"),
              "",
              f"at full depth ({r['size']:,} waiting): {r['bytes_per_msg']:.0f} bytes/msg; "
              f"size() {r['size_ms']:.1f} ms, stats {r['stats_ms']:.1f} ms, peek(10) "
              f"{r['peek_ms']:.1f} ms, unack pass {r['unack_pass_ms']:.1f} ms (none expired), "
              f"{r['unack_expired_ms']:.1f} ms ({r['expired']:,} expired)",
              f"probe lateness through a waiting pop: p50 {r['probe_p50']:.2f} ms, "
              f"p99 {r['probe_p99']:.2f} ms"]
    if replicas:
        from . import scale_fault

        lines += scale_fault.report_lines(r)
    else:
        lines.append(f"exactly once: {r['lost']:,} lost, {r['duplicated']:,} duplicated")
    return "\n".join(lines)


def passed(r: dict[str, Any]) -> bool:
    """No id lost, none delivered early; no duplicate, or with a primary killed no more than
    its bound (the messages in flight at the kill and one batch per consumer)."""
    if r["lost"] or r.get("early", 0):
        return False
    return bool(r["duplicated"] <= r.get("duplicate_bound", 0))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=10_000_000)
    parser.add_argument("--primaries", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=0, help="default: 4 x primaries")
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--expired", type=int, default=100_000,
                        help="leases expired for the second unack pass")
    parser.add_argument("--replicas", type=int, default=0,
                        help="replicas per primary; >= 1 writes with write_quorum=1")
    parser.add_argument("--kill-primary", action="store_true",
                        help="SIGKILL one primary once half the messages are drained "
                             "(needs --replicas >= 1 and --primaries >= 3)")
    options = parser.parse_args(argv)
    options.partitions = options.partitions or 4 * options.primaries
    if options.messages < 10 or options.procs < 1 or options.replicas < 0:
        parser.error("--messages >= 10, --procs >= 1 and --replicas >= 0")
    if options.kill_primary and (options.replicas < 1 or options.primaries < 3):
        parser.error("--kill-primary needs --replicas >= 1 and --primaries >= 3 (a majority "
                     "of primaries elects the replica)")
    result = run(options)
    print(report(result))
    return 0 if passed(result) else 1


if __name__ == "__main__":
    sys.exit(main())
