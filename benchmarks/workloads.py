"""The workloads, each one measurement of one library on a freshly flushed server.

Every function returns a plain dict (JSON-ready). Rates are messages per second; times are
milliseconds; memory is bytes. "n/a" cases raise :class:`~benchmarks.peers.NotSupported`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from .common import (
    RoundTrips,
    command_stats,
    items,
    make_item,
    now_ms,
    percentiles,
    reads_processed,
    reset_stats,
    used_memory,
)
from .peers import Adapter, AsyncAdapter, NotSupported, load
from .procs import ConsumerGroup

#: Delay of the messages of the enqueue workload: they stay waiting while memory is measured.
ENQUEUE_DELAY_MS = 3_600_000
#: Messages per bulk call in the lateness workload: the producer computes each delay just
#: before the call that carries it, so a library that counts the delay from the moment the
#: call arrives (dynoqueue: the server's clock) is not charged for a big batch's build time.
LATENESS_CHUNK = 50
#: Pause after FLUSHALL before reading used_memory, for connections of killed consumer
#: processes to be closed and their buffers freed.
_SETTLE_S = 0.3


@dataclass
class Server:
    """The server under test.

    Attributes:
        url: ``redis://127.0.0.1:port/0``.
        port: its TCP port.
        admin: a redis-py client (decode_responses=True) for FLUSHALL, INFO and CONFIG.
    """

    url: str
    port: int
    admin: Any


def _per_message(stats: dict[str, int], n: int) -> float:
    return sum(stats.values()) / n if n else float("nan")


def _fill(adapter: Adapter, batch: list[Any], chunk: int | None = None) -> None:
    """Put ``batch`` into the queue untimed, the fastest way the library offers."""
    try:
        adapter.enqueue(batch, batched=True, chunk=chunk)
    except NotSupported:
        adapter.enqueue(batch, batched=False)


def memory(server: Server, name: str, n: int) -> dict[str, Any]:
    """Workload 5: ``used_memory`` growth per waiting message, for ``n`` messages due in 1 h.

    Returns:
        ``memory_per_msg`` (bytes), ``n``.
    """
    server.admin.flushall()
    time.sleep(_SETTLE_S)
    adapter = load(name)(server.url)
    try:
        batch = items(n, ENQUEUE_DELAY_MS, prefix="b")
        mem0 = used_memory(server.admin)
        _fill(adapter, batch)
        mem1 = used_memory(server.admin)
        waiting = adapter.waiting()
    finally:
        adapter.close()
    if waiting != n:
        raise RuntimeError(f"{name}: {waiting} of {n} enqueued messages are waiting")
    return {"memory_per_msg": (mem1 - mem0) / n, "n": n}


def enqueue(server: Server, name: str, n: int, batched: bool, tasks: int = 1
            ) -> dict[str, Any]:
    """Workload 1 (+5, +6, +7): enqueue ``n`` messages delayed by an hour, one call each or in
    bulk; with ``tasks`` > 1 (asyncio libraries), one call each from that many concurrent tasks
    on the adapter's event loop, after an untimed round of one message per task (so that
    opening ``tasks`` connections and loading scripts is not timed: the steady state of a
    service with that many concurrent producers).

    Returns:
        ``rate`` (msgs/s), ``commands_per_msg`` (server commands incl. those run inside Lua),
        ``round_trips_per_msg`` (requests the client sent), ``commands`` (per-command calls).

    Raises:
        NotSupported: no bulk API (``batched``); not an asyncio library (``tasks`` > 1).
    """
    server.admin.flushall()
    adapter = load(name)(server.url)
    try:
        concurrent = adapter if isinstance(adapter, AsyncAdapter) and tasks > 1 else None
        if tasks > 1 and (batched or concurrent is None):
            raise NotSupported("concurrent one-per-call enqueues need an asyncio API")
        batch = items(n, ENQUEUE_DELAY_MS, prefix="e")
        warm = 0
        if concurrent is not None:
            warm = tasks
            concurrent.enqueue_concurrently(items(warm, ENQUEUE_DELAY_MS, prefix="w"), tasks)
        reset_stats(server.admin)
        RoundTrips.reset()
        started = time.perf_counter()
        if concurrent is not None:
            concurrent.enqueue_concurrently(batch, tasks)
        else:
            adapter.enqueue(batch, batched)
        elapsed = time.perf_counter() - started
        trips = RoundTrips.reset()
        stats = command_stats(server.admin)
        waiting = adapter.waiting()
    finally:
        adapter.close()
    if waiting != n + warm:
        raise RuntimeError(f"{name}: {waiting} of {n + warm} enqueued messages are waiting")
    return {"rate": n / elapsed, "commands_per_msg": _per_message(stats, n),
            "round_trips_per_msg": trips / n, "commands": stats, "n": n,
            **({"tasks": tasks} if tasks > 1 else {})}


def consume(server: Server, name: str, n: int, procs: int,
            options: dict[str, Any] | None = None, timeout_s: float = 120.0) -> dict[str, Any]:
    """Workload 2 (+6): ``procs`` consumer processes take ``n`` due messages and ack them.

    Returns:
        ``rate`` (msgs/s from releasing the consumers until the n-th delivery is acked, i.e.
        until the library reports nothing waiting, in flight or unacked), ``commands_per_msg``,
        ``round_trips_per_msg`` (consumer side), ``commands``.

    Raises:
        RuntimeError: a consumer failed, or not all messages were acked within ``timeout_s``.
    """
    server.admin.flushall()
    producer = load(name)(server.url)
    group = None
    try:
        _fill(producer, items(n, 0, prefix="c"))
        if producer.waiting() != n:
            raise RuntimeError(f"{name}: {producer.waiting()} of {n} messages queued")
        group = ConsumerGroup(name, server.url, procs, n, options=options).start()
        reset_stats(server.admin)
        group.go()
        elapsed = group.wait(timeout_s)
        if elapsed is not None:
            # The n-th delivery happens before its ack: wait for the library to finish it.
            deadline = time.monotonic() + 10.0
            while producer.waiting() and time.monotonic() < deadline:
                time.sleep(0.001)
            elapsed = time.perf_counter() - group.started_at if not producer.waiting() else None
        stats = command_stats(server.admin)
        delivered = group.delivered()
    finally:
        producer.close()
        reports = group.stop() if group is not None else []
    errors = [r["error"] for r in reports if "error" in r]
    if errors or elapsed is None:
        raise RuntimeError(f"{name}: {delivered}/{n} delivered; {errors[0] if errors else ''}")
    trips = sum(r.get("round_trips", 0) for r in reports)
    return {"rate": n / elapsed, "commands_per_msg": _per_message(stats, n),
            "round_trips_per_msg": trips / n, "commands": stats, "n": n, "procs": procs}


def lateness(server: Server, name: str, n: int, spread_s: float, *, idle_s: float = 2.0,
             lead_s: float = 1.0, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Workload 3: one waiting consumer; ``n`` messages due evenly over ``spread_s`` seconds.

    First the idle consumer's own cost is measured for ``idle_s`` seconds (commands and
    socket reads per second on the server, with nothing to deliver). Then the messages are
    enqueued (in bulk calls of LATENESS_CHUNK where the library can), the first due
    ``lead_s`` after the enqueue starts. Lateness = receive time in the consumer - the due
    time the producer asked for (negative = early).

    Returns:
        ``p50``, ``p99``, ``max``, ``min`` (ms), ``count``, ``delivered``, ``samples`` (ms),
        ``idle_commands_per_s``, ``idle_reads_per_s``, ``idle_commands`` (per command), and
        ``due_offset_ms`` when the library records a later due time than asked (see
        :meth:`Adapter.due_offset_ms`).
    """
    server.admin.flushall()
    group = ConsumerGroup(name, server.url, 1, n, lateness=True, options=options).start()
    producer = load(name)(server.url)
    try:
        group.go()
        time.sleep(min(1.0, max(0.5, idle_s)))  # let the consumer reach its idle wait
        reset_stats(server.admin)
        reads0 = reads_processed(server.admin)
        time.sleep(idle_s)
        idle = command_stats(server.admin)
        reads = reads_processed(server.admin) - reads0 - 2  # less the INFO calls themselves
        start = now_ms() + lead_s * 1000
        batch = [make_item(f"l{i}", start + i * spread_s * 1000 / n) for i in range(n)]
        _fill(producer, batch, LATENESS_CHUNK)
        offset = producer.due_offset_ms(batch)
        group.wait(lead_s + spread_s + 15.0)
    finally:
        producer.close()
        reports = group.stop()
    samples = [s for r in reports for s in r.get("samples", [])]
    errors = [r["error"] for r in reports if "error" in r]
    if errors:
        raise RuntimeError(f"{name}: {errors[0]}")
    return {**percentiles(samples), "delivered": len(samples), "n": n, "spread_s": spread_s,
            "samples": samples, "idle_commands_per_s": sum(idle.values()) / idle_s,
            "idle_reads_per_s": max(0, reads) / idle_s, "idle_commands": idle,
            **({"due_offset_ms": offset} if offset is not None else {})}


def depth_scaling(server: Server, depths: list[int], probe: int, probe_single: int,
                  runs: int, progress: Any = None) -> dict[str, Any]:
    """Workload 4 (+5): dynoqueue push/pop cost with ``depth`` messages waiting (not yet due).

    One queue per depth is filled with messages due in 10 days. Then, ``runs`` times and taking
    the queues in turn (so a change in machine load hits every depth alike): push ``probe`` due
    messages in batches, pop + ack them in batches, then the same one message per call for
    ``probe_single`` messages. The depth of each queue stays the same throughout. One untimed
    round comes first, to warm up.

    Returns:
        ``{"depths": {depth: {"push": [rates], "pop+ack": [...], "push single": [...],
        "pop+ack single": [...]}}, "memory_per_msg": bytes per waiting message at the largest
        depth}``.
    """
    from dynoqueue import Message

    from .peers.dynoqueue_adapter import BATCH, DynoqueueAdapter

    server.admin.flushall()
    time.sleep(_SETTLE_S)
    adapters = {depth: DynoqueueAdapter(server.url, queue=f"depth{depth}") for depth in depths}
    out: dict[str, Any] = {"depths": {depth: {"push": [], "pop+ack": [], "push single": [],
                                              "pop+ack single": []} for depth in depths}}
    try:
        for depth in depths:
            q = adapters[depth].q
            mem0 = used_memory(server.admin)
            for start in range(0, depth, BATCH):
                q.push([Message(f"f{i}", "x" * 60, timeout=864_000_000)
                        for i in range(start, min(depth, start + BATCH))])
            out["memory_per_msg"] = (used_memory(server.admin) - mem0) / max(depth, 1)
            if progress is not None:
                progress(depth)
        for run in range(-1, runs):  # run -1: warm-up, not recorded
            for depth in depths:
                q = adapters[depth].q
                figures = out["depths"][depth]
                rates: dict[str, float] = {}
                msgs = [Message(f"p{run}.{i}", "x" * 60) for i in range(probe)]
                started = time.perf_counter()
                for i in range(0, probe, BATCH):
                    q.push(msgs[i:i + BATCH])
                rates["push"] = probe / (time.perf_counter() - started)
                started = time.perf_counter()
                got = 0
                while got < probe:
                    batch = q.pop(BATCH)
                    q.ack_many(batch)
                    got += len(batch)
                rates["pop+ack"] = probe / (time.perf_counter() - started)
                singles = [Message(f"s{run}.{i}", "x" * 60) for i in range(probe_single)]
                started = time.perf_counter()
                for m in singles:
                    q.push([m])
                rates["push single"] = probe_single / (time.perf_counter() - started)
                started = time.perf_counter()
                for _ in range(probe_single):
                    (m,) = q.pop(1)
                    q.ack(m.id)
                rates["pop+ack single"] = probe_single / (time.perf_counter() - started)
                if run >= 0:
                    for key, value in rates.items():
                        figures[key].append(value)
        out["waiting"] = {depth: adapters[depth].q.size() for depth in depths}
    finally:
        for adapter in adapters.values():
            adapter.q.clear()
            adapter.close()
    return out
