"""Paired A/B enqueues: two libraries (or dynoqueue's two APIs) enqueue in alternating blocks on
open connections, and the ratio is taken per block pair.

Separate steps of a run measure each side seconds or minutes apart, and on a shared VM the
machine's speed drifts that much in that time (a loopback PING took 83 us in one session and
110-310 us in the next, on the same idle box). A pair of blocks run back to back sees the same
machine, so the median of the per-pair ratios follows what each library costs, not when it
ran. The block order alternates (A B, then B A) so that neither side always runs first.

    paired(server, "dynoqueue", "huey", batched=False)  # one message per call
    paired(server, "dynoqueue.asyncio", "dynoqueue", batched=True)  # 500 per call
    paired_consume(server, "dynoqueue.asyncio", "dynoqueue")  # pop(500) + ack_many
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from .common import items
from .peers import load

#: Messages are delayed by an hour, as in workload 1, so nothing becomes due meanwhile.
DELAY_MS = 3_600_000


def _alternate(server: Any, a: str, b: str, pairs: int, size: int,
               block: Callable[[str, Any, str], float],
               check: Callable[[str, Any], None] | None = None) -> dict[str, Any]:
    """Open adapters ``a`` and ``b`` on a flushed server, run ``block(side, adapter, label)``
    (its msgs/s) once each untimed, then ``pairs`` times each in alternating order; then
    ``check(side, adapter)`` each; close them and flush. Returns the pair ratios' median."""
    server.admin.flushall()
    sides = {"a": load(a)(server.url, queue="paired_a"), "b": load(b)(server.url, queue="paired_b")}
    rates: dict[str, list[float]] = {"a": [], "b": []}
    try:
        for side, adapter in sides.items():
            block(side, adapter, f"w{side}")
        for pair in range(pairs):
            for side in ("a", "b") if pair % 2 == 0 else ("b", "a"):
                rates[side].append(block(side, sides[side], f"p{side}{pair}-"))
        if check is not None:
            for side, adapter in sides.items():
                check(side, adapter)
    finally:
        for adapter in sides.values():
            adapter.close()
        server.admin.flushall()
    return {"ratio": statistics.median(x / y for x, y in zip(rates["a"], rates["b"],
                                                             strict=True)),
            "a_rate": statistics.median(rates["a"]), "b_rate": statistics.median(rates["b"]),
            "pairs": pairs, "size": size}


def paired(server: Any, a: str, b: str, batched: bool, pairs: int = 16,
           size: int = 250) -> dict[str, Any]:
    """Enqueue ``pairs`` blocks of ``size`` messages through ``a`` and as many through ``b``,
    alternately, after an untimed warm-up block each (connections open, scripts loaded).

    Args:
        server: the bench :class:`~benchmarks.workloads.Server` (FLUSHALLed first).
        a, b: adapter names (``benchmarks.peers.load``), e.g. "dynoqueue" and "huey".
        batched: enqueue each block in bulk (the adapter's bulk API) instead of one per call.
        pairs: block pairs timed (>= 1).
        size: messages per block (>= 1).

    Returns:
        ``{"ratio": median over pairs of a's rate / b's rate, "a_rate", "b_rate": median
        block rates (msgs/s), "pairs", "size"}``.

    Raises:
        NotSupported: an adapter has no bulk API (``batched``).
        RuntimeError: a side's messages are not all waiting afterwards.
    """
    def block(side: str, adapter: Any, label: str) -> float:
        batch = items(size, DELAY_MS, prefix=label)
        started = time.perf_counter()
        adapter.enqueue(batch, batched)
        return size / (time.perf_counter() - started)

    def check(side: str, adapter: Any) -> None:
        waiting = adapter.waiting()
        if waiting != (pairs + 1) * size:
            raise RuntimeError(f"{(a, b)[side == 'b']}: {waiting} of {(pairs + 1) * size} "
                               "enqueued messages are waiting")

    return _alternate(server, a, b, pairs, size, block, check)


def paired_consume(server: Any, a: str, b: str, pairs: int = 12,
                   size: int = 5_000) -> dict[str, Any]:
    """Drain ``pairs`` blocks of ``size`` due messages through ``a``'s consumer and as many
    through ``b``'s, alternately, in this process (each adapter's own consumer loop, as in
    workload 2, stopped once it has taken the block); each block is enqueued in bulk,
    untimed, right before it is drained. An untimed block each goes first.

    Returns:
        As :func:`paired`: the median per-pair ratio of a's rate / b's rate and the median
        block rates (msgs/s).

    Raises:
        RuntimeError: a side's queue is not empty after a block (a message lost or left).
    """
    def block(side: str, adapter: Any, label: str) -> float:
        adapter.enqueue(items(size, 0.0, prefix=label), True)
        taken, stop = [0], threading.Event()

        def on_batch(bodies: Sequence[str]) -> None:
            taken[0] += len(bodies)
            if taken[0] >= size:
                stop.set()

        started = time.perf_counter()
        adapter.consume(on_batch, stop)
        elapsed = time.perf_counter() - started
        left = adapter.waiting()
        if taken[0] != size or left:
            raise RuntimeError(f"{(a, b)[side == 'b']}: took {taken[0]} of {size}, "
                               f"{left} left")
        return size / elapsed

    return _alternate(server, a, b, pairs, size, block)
