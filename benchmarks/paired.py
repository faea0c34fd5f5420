"""Paired A/B enqueues: two libraries (or dynoqueue's two APIs) enqueue in alternating blocks on
open connections, and the ratio is taken per block pair.

Separate steps of a run measure each side seconds or minutes apart, and on a shared VM the
machine's speed drifts that much in that time (a loopback PING took 83 us in one session and
110-310 us in the next, on the same idle box). A pair of blocks run back to back sees the same
machine, so the median of the per-pair ratios follows what each library costs, not when it
ran. The block order alternates (A B, then B A) so that neither side always runs first.

    paired(server, "dynoqueue", "huey", batched=False)  # one message per call
    paired(server, "dynoqueue.asyncio", "dynoqueue", batched=True)  # 500 per call
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from .common import items
from .peers import load

#: Messages are delayed by an hour, as in workload 1, so nothing becomes due meanwhile.
DELAY_MS = 3_600_000


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
    server.admin.flushall()
    sides = {"a": load(a)(server.url, queue="paired_a"), "b": load(b)(server.url, queue="paired_b")}
    rates: dict[str, list[float]] = {"a": [], "b": []}
    try:
        for name, adapter in sides.items():
            adapter.enqueue(items(size, DELAY_MS, prefix=f"w{name}"), batched)
        for pair in range(pairs):
            for name in ("a", "b") if pair % 2 == 0 else ("b", "a"):
                batch = items(size, DELAY_MS, prefix=f"p{name}{pair}-")
                started = time.perf_counter()
                sides[name].enqueue(batch, batched)
                rates[name].append(size / (time.perf_counter() - started))
        for name, adapter in sides.items():
            waiting = adapter.waiting()
            if waiting != (pairs + 1) * size:
                raise RuntimeError(f"{(a, b)[name == 'b']}: {waiting} of {(pairs + 1) * size} "
                                   "enqueued messages are waiting")
    finally:
        for adapter in sides.values():
            adapter.close()
        server.admin.flushall()
    return {"ratio": statistics.median(x / y for x, y in zip(rates["a"], rates["b"],
                                                             strict=True)),
            "a_rate": statistics.median(rates["a"]), "b_rate": statistics.median(rates["b"]),
            "pairs": pairs, "size": size}
