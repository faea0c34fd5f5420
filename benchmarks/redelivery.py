"""Redelivery lateness after a lease ends, with a consumer waiting (table 11b).

``python -m benchmarks.redelivery [--url URL] [--leases 300] [--lease-ms 200]`` measures how
late a message whose lease ended (its consumer neither acked nor extended it) reaches a second
consumer that waits in ``pop(1, wait_ms=...)``. Without ``--url`` it starts a redis-server
(``dynoqueue.embedded.single``). On one queue of one shard, in waves of ``wave`` messages:

1. the wave is pushed, due at once;
2. the first consumer leases them one per ``pop(1, lease_ms=lease_ms)`` call, the calls spread
   evenly over ``spread_ms`` (default half the lease, so every lease of the wave is taken before
   the first one ends), and never acks;
3. then the second consumer (its own factory and connections, in a thread) loops on
   ``pop(1, wait_ms=wait_ms)`` until it has had every message of the wave again, acking each
   with its receipt; nothing else claims meanwhile.

Lateness = the moment the second consumer's pop returned the message - the end of the first
lease. The end is the first claim's server time plus ``lease_ms`` (a receipt is
``deliveries:claim_ms``, server epoch ms); the return moment is ``time.time()`` of this process,
put on the server's clock by the offset read with ``TIME`` (the round trip's midpoint, best of
5) before the run (~0 ms with a server on this machine, which shares its clock). The server's
own part, ``claim_*``: the redelivering claim's time (its receipt) - the lease's end.

The factories run the unack reprocessor at its default period (60 s), so it is never what puts
an ended lease back here: the next claim of the shard does, and a waiting pop learns from each
claim when the next lease of its shard ends. A wave whose messages do not all come back within
``timeout_s`` after its last lease end stops the run (reported as lost).

The suite's ``lifecycle`` section (``dynoqueue bench --sections lifecycle``) runs
:func:`measure` once per run (report table 11b and its goal).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .common import PAD, percentiles

#: The unack reprocessor's period (the library's default): far longer than a run's leases, so
#: only a claim can put an ended lease back.
REPROCESSOR_MS = 60_000
#: The goal of the issue: redelivery p99 after a lease ends, with a consumer waiting (ms).
GOAL_P99_MS = 50.0


def clock_offset_ms(client: Any, tries: int = 5) -> float:
    """The server's clock - this machine's ``time.time()``, in ms, from ``TIME`` (the sample
    with the shortest round trip, taken at its midpoint)."""
    best: tuple[float, float] | None = None
    for _ in range(tries):
        before = time.time()
        seconds, micros = client.time()
        after = time.time()
        sample = (after - before, seconds * 1000 + micros / 1000 - (before + after) * 500)
        if best is None or sample[0] < best[0]:
            best = sample
    assert best is not None
    return best[1]


def claim_ms(receipt: str | None) -> int:
    """The server time (epoch ms) of the claim that gave ``receipt`` (``deliveries:claim_ms``)."""
    if not receipt or ":" not in receipt:
        raise RuntimeError(f"a popped message without a receipt ({receipt!r})")
    return int(receipt.split(":", 1)[1])


def _second(q: Any, ends: dict[str, int], offset_ms: float, wait_ms: int,
            deadline: float) -> dict[str, tuple[float, int]]:
    """The waiting consumer of one wave: pop(1, wait_ms) until every id of ``ends`` came back
    or ``deadline`` (monotonic) passed.

    Returns:
        ``{id: (lateness ms, server claim lateness ms)}`` of the messages it got again.
    """
    got: dict[str, tuple[float, int]] = {}
    while len(got) < len(ends):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        popped = q.pop(1, wait_ms=max(1, min(wait_ms, int(remaining * 1000))))
        now = time.time() * 1000 + offset_ms
        for m in popped:
            if m.id not in ends or m.id in got:
                raise RuntimeError(f"the waiting consumer got {m.id!r}, not an ended lease")
            got[m.id] = (now - ends[m.id], claim_ms(m.receipt) - ends[m.id])
            if m.deliveries != 2:
                raise RuntimeError(f"{m.id}: delivery {m.deliveries}, expected the 2nd")
            q.ack(m.id, receipt=m.receipt)
    return got


def measure(url: str, leases: int = 300, lease_ms: int = 200, *, wave: int = 20,
            spread_ms: int | None = None, wait_ms: int = 1_000, timeout_s: float = 5.0,
            key_prefix: str | None = None) -> dict[str, Any]:
    """Redelivery lateness after ``leases`` leases of ``lease_ms`` end (module docstring).

    Args:
        url: ``redis://host:port/db`` of one redis-server (not flushed: the run's keys, under a
            unique prefix, are deleted after).
        leases: messages leased by the first consumer and never acked, >= 1.
        lease_ms: their lease (``pop(..., lease_ms=)``), >= 20.
        wave: leases taken before the second consumer waits for them (the last wave may be
            smaller).
        spread_ms: the first pops of a wave are spread over this, < ``lease_ms`` (default
            ``lease_ms // 2``): the leases end as far apart as they were taken.
        wait_ms: ``wait_ms`` of the second consumer's pops.
        timeout_s: how long after a wave's last lease end its messages may take to come back;
            past it the run stops and reports the missing ones as lost.
        key_prefix: the factories' key prefix (default a unique ``bench.redelivery.*``).

    Returns:
        ``{"n": leased, "redelivered": got again, "lost": n - redelivered, "count", "p50",
        "p99", "max", "min" (lateness ms), "claim_p50", "claim_p99", "claim_max" (server
        claim - lease end, ms), "samples": [lateness ms], "lease_ms", "wave", "spread_ms",
        "waves", "clock_offset_ms", "wall_s"}``.
    """
    import redis

    import dynoqueue

    if leases < 1 or wave < 1 or lease_ms < 20:
        raise ValueError("leases and wave must be >= 1, lease_ms >= 20")
    spread = lease_ms // 2 if spread_ms is None else spread_ms
    if not 0 <= spread < lease_ms:
        raise ValueError(f"spread_ms must be in [0, lease_ms): got {spread}")
    prefix = key_prefix or f"bench.redelivery.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    options = {"key_prefix": prefix, "unack_handler_interval_ms": REPROCESSOR_MS}
    admin = redis.Redis.from_url(url)
    first = dynoqueue.RedisQueues.from_url(url, **options)
    second = dynoqueue.RedisQueues.from_url(url, **options)
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="redelivery-consumer")
    lateness: list[float] = []
    server: list[float] = []
    leased = waves = 0
    started = time.perf_counter()
    try:
        offset = clock_offset_ms(admin)
        q1, q2 = first.get("redelivery"), second.get("redelivery")
        while leased < leases:
            size = min(wave, leases - leased)
            ids = [f"r{leased + i}" for i in range(size)]
            q1.push([dynoqueue.Message(i, f'{{"id":"{i}","pad":"{PAD}"}}') for i in ids])
            ends: dict[str, int] = {}
            t0 = time.monotonic()
            for i in range(size):
                pause = t0 + i * spread / size / 1000 - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                popped = q1.pop(1, lease_ms=lease_ms)
                if len(popped) != 1 or popped[0].id not in ids or popped[0].id in ends \
                        or popped[0].deliveries != 1:
                    raise RuntimeError(f"the first consumer's pop {i + 1} of the wave got "
                                       f"{[(m.id, m.deliveries) for m in popped]}")
                ends[popped[0].id] = claim_ms(popped[0].receipt) + lease_ms
            leased += size
            waves += 1
            last_end = max(ends.values()) - offset  # on this machine's clock, epoch ms
            deadline = time.monotonic() + (last_end - time.time() * 1000) / 1000 + timeout_s
            got = pool.submit(_second, q2, ends, offset, wait_ms, deadline).result()
            lateness += [late for late, _ in got.values()]
            server += [float(claimed) for _, claimed in got.values()]
            if len(got) < size:
                break
    finally:
        pool.shutdown()
        try:
            first.get("redelivery").clear()
        finally:
            first.close()
            second.close()
            keys = list(admin.scan_iter(match=f"{prefix}*", count=1_000))
            if keys:
                admin.delete(*keys)
            admin.close()
    claims = percentiles(server)
    return {"n": leased, "redelivered": len(lateness), "lost": leased - len(lateness),
            **percentiles(lateness), "claim_p50": claims["p50"], "claim_p99": claims["p99"],
            "claim_max": claims["max"], "samples": lateness, "lease_ms": lease_ms,
            "wave": wave, "spread_ms": spread, "waves": waves, "clock_offset_ms": offset,
            "wall_s": time.perf_counter() - started}


def table(result: dict[str, Any]) -> str:
    """The result as a small Markdown table plus one line of method."""
    lines = ["| leases ended | redelivered | p50 ms | p99 ms | max ms | server claim p99 ms |",
             "|---|---|---|---|---|---|",
             f"| {result['n']:,} | {result['redelivered']:,} | {result['p50']:.2f} | "
             f"{result['p99']:.2f} | {result['max']:.2f} | {result['claim_p99']:.0f} |", "",
             f"lateness = the waiting consumer's pop(1, wait_ms) returned - (first claim + "
             f"lease_ms {result['lease_ms']}); {result['waves']} wave(s) of up to "
             f"{result['wave']} leases, each taken over {result['spread_ms']} ms; clock offset "
             f"to the server {result['clock_offset_ms']:+.2f} ms; goal p99 < {GOAL_P99_MS:g} ms; "
             f"{result['wall_s']:.1f} s"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """``python -m benchmarks.redelivery``: run :func:`measure` (on a started server without
    ``--url``) and print its table."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.redelivery",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="redis://host:port/db (default: start a redis-server)")
    parser.add_argument("--leases", type=int, default=300, help="leases that end (default 300)")
    parser.add_argument("--lease-ms", type=int, default=200, help="their lease (default 200)")
    parser.add_argument("--wave", type=int, default=20, help="leases per wave (default 20)")
    parser.add_argument("--json", type=Path, help="also write the raw figures here")
    args = parser.parse_args(argv)
    if args.url:
        result = measure(args.url, args.leases, args.lease_ms, wave=args.wave)
    else:
        from dynoqueue.embedded import single

        with single() as server:
            result = measure(server.url, args.leases, args.lease_ms, wave=args.wave)
    print(table(result))
    if result["lost"]:
        print(f"LOST: {result['lost']} leased message(s) not delivered again", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
