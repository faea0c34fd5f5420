"""Workload 10 (issue 15): batched pop + ack with strict priority and with ordered groups,
against a plain queue, each holding the same backlog of due messages.

Three queues per depth, filled with the same messages (~60-byte bodies, priorities spread
over 0..99): "plain" (the default policy), "strict" (``QueuePolicy(strict_priority=True)``)
and "grouped" (every message in one of ``groups`` ordered groups). The backlog is due, so the
ordering is what every claim works through: the strict queue's ready zset sorted by priority,
the grouped queue's current messages (one per group; each ack moves its group on).

A probe pops ``BATCH`` messages, acks them, and pushes as many new ones (untimed) so that the
depth stays within one batch of the target; only the pops and acks are timed. The kinds are
taken in turn within each run (so a change in machine load hits them alike), one untimed
round first.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from dynoqueue import Message, QueuePolicy

from .common import PAD, reset_stats, used_memory
from .peers.dynoqueue_adapter import BATCH, DynoqueueAdapter

#: The kinds of queue compared, in table order; "plain" is what the others are held against.
KINDS = ("plain", "strict", "grouped")
#: Priority levels the messages are spread over (Message.priority is 0..99).
PRIORITIES = 100
#: Messages per push call when filling: one call runs its 500-message scripts in one
#: pipelined round trip, so filling 1M takes ~2,000 calls of client work and no waiting.
FILL_CALL = 20_000
_BODY = '{"id":"%s","due":0,"pad":"' + PAD + '"}'


def _policy(kind: str) -> QueuePolicy:
    return QueuePolicy(strict_priority=kind == "strict")


def _messages(kind: str, prefix: str, start: int, stop: int, groups: int,
              rng: random.Random) -> list[Message]:
    """Messages ``prefix<start>`` .. ``prefix<stop - 1>``, due now, random priorities (and a
    random group of ``groups`` for the grouped kind)."""
    out = []
    for i in range(start, stop):
        mid = f"{prefix}{i}"
        out.append(Message(mid, _BODY % mid, priority=rng.randrange(PRIORITIES),
                           group=f"g{rng.randrange(groups)}" if kind == "grouped" else None))
    return out


def _script_us(admin: Any) -> float:
    """Microseconds the server spent in script calls (EVALSHA) since the last reset."""
    return sum(float(v["usec"]) for k, v in admin.info("commandstats").items()
               if k.removeprefix("cmdstat_").lower() in ("evalsha", "eval"))


def _server_split(admin: Any, q: Any, kind: str, groups: int, rng: random.Random,
                  batches: int = 4) -> dict[str, float]:
    """Where a message's time goes on the server: script microseconds per message of the
    pops, of the acks, and of pushing as many new ones back (the depth is held), for
    ``batches`` pops of BATCH. The rates time the pops and acks only; the push column shows
    what a producer pays for each kind."""
    reset_stats(admin)
    got = [m for _ in range(batches) for m in q.pop(BATCH)]
    pop_us = _script_us(admin)
    reset_stats(admin)
    q.ack_many(got)
    ack_us = _script_us(admin)
    reset_stats(admin)
    q.push(_messages(kind, "s", 0, len(got), groups, rng))
    push_us = _script_us(admin)
    n = max(1, len(got))
    return {"pop": pop_us / n, "ack": ack_us / n, "push": push_us / n}


def ordering(server: Any, depths: list[int], probe: int, groups: int, runs: int,
             progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Pop + ack rates of the plain, strict and grouped queues at each depth.

    Args:
        server: the :class:`~benchmarks.workloads.Server` (FLUSHALLed first).
        depths: due messages waiting in each queue, e.g. ``[1_000, 1_000_000]``.
        probe: messages popped and acked per measurement (a multiple of BATCH is best).
        groups: ordered groups the grouped queue's messages are spread over.
        runs: measurements per queue (after one untimed round).
        progress: called with a short label as each queue is filled.

    Returns:
        ``{"depths": {depth: {kind: [rates msgs/s]}}, "fill_s": {depth: {kind: seconds}},
        "memory_per_msg": {kind: bytes at the largest depth}, "waiting": {depth: {kind: n}}
        (after the runs: the depth held),
        "server_us": {depth: {kind: {"pop": us, "ack": us, "push": us}}} (script time per
        message on the server, after the runs), "groups": groups, "probe": probe}``.

    Raises:
        RuntimeError: a pop found fewer messages than the backlog holds (a queue went empty).
    """
    server.admin.flushall()
    rng = random.Random(15)
    adapters: dict[tuple[int, str], DynoqueueAdapter] = {}
    out: dict[str, Any] = {"depths": {d: {k: [] for k in KINDS} for d in depths},
                           "fill_s": {d: {} for d in depths}, "memory_per_msg": {},
                           "groups": groups, "probe": probe}
    try:
        for depth in depths:
            for kind in KINDS:
                if progress is not None:
                    progress(f"fill {kind} to {depth:,}")
                adapter = DynoqueueAdapter(server.url, queue=f"{kind}{depth}",
                                           policy=_policy(kind))
                adapters[depth, kind] = adapter
                mem0 = used_memory(server.admin)
                started = time.perf_counter()
                for first in range(0, depth, FILL_CALL):
                    adapter.q.push(_messages(kind, "f", first, min(depth, first + FILL_CALL),
                                             groups, rng))
                out["fill_s"][depth][kind] = time.perf_counter() - started
                if depth == depths[-1]:
                    out["memory_per_msg"][kind] = (used_memory(server.admin) - mem0) / depth
        serial = 0
        for run in range(-1, runs):  # run -1: warm-up, not recorded
            for depth in depths:
                for kind in KINDS:
                    q = adapters[depth, kind].q
                    timed, done = 0.0, 0
                    while done < probe:
                        started = time.perf_counter()
                        got = q.pop(BATCH)
                        q.ack_many(got)
                        timed += time.perf_counter() - started
                        if not got:
                            raise RuntimeError(f"{kind} queue at depth {depth}: pop found "
                                               "nothing")
                        q.push(_messages(kind, "r", serial, serial + len(got), groups, rng))
                        serial += len(got)
                        done += len(got)
                    if run >= 0:
                        out["depths"][depth][kind].append(done / timed)
        out["waiting"] = {d: {k: adapters[d, k].q.size() for k in KINDS} for d in depths}
        out["server_us"] = {d: {k: _server_split(server.admin, adapters[d, k].q, k, groups, rng)
                                for k in KINDS} for d in depths}
    finally:
        for adapter in adapters.values():
            adapter.close()
        server.admin.flushall()
    return out
