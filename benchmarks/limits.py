"""The physical limit: what Redis itself does with the commands one message needs.

Two measures on the same server:

* ``redis-benchmark`` (the C client shipped with Redis, one connection, pipelined): the rate of
  each bare command a message needs, combined into messages/s for a command mix by adding the
  per-command times (1 / sum(1 / rate)). This is the server's limit on this machine.
* a raw redis-py loop: the same commands, pipelined in batches from Python, non-atomic and
  without any queue logic. This is what any Python client can reach with plain commands.

Mixes per message: push = HSET (payload) + ZADD (due time); pop + ack = HGET + ZREM + ZADD
(claim: read payload, leave the queue zset, enter the unack zset) + ZREM + HDEL (ack); the
ZRANGEBYSCORE that finds due ids is one per batch and left out.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from typing import Any

from .common import PAD

#: Every bare command of the mixes, as redis-benchmark arguments (``__rand_int__`` is replaced
#: by a random 12-digit number in the range given with -r).
COMMANDS: dict[str, list[str]] = {
    "HSET": ["HSET", "lim:h", "m:__rand_int__", "v" * 60],
    "ZADD": ["ZADD", "lim:z", "__rand_int__", "m:__rand_int__"],
    "HGET": ["HGET", "lim:h", "m:__rand_int__"],
    "ZREM": ["ZREM", "lim:z", "m:__rand_int__"],
    "HDEL": ["HDEL", "lim:h", "m:__rand_int__"],
}
MIXES: dict[str, list[str]] = {
    "push": ["HSET", "ZADD"],
    "pop+ack": ["HGET", "ZREM", "ZADD", "ZREM", "HDEL"],
}
PIPELINE = 64
BATCH = 500


def find_redis_benchmark() -> str | None:
    """Path of ``redis-benchmark``: on PATH, else beside the redis-server dynoqueue uses."""
    found = shutil.which("redis-benchmark")
    if found:
        return found
    try:
        from dynoqueue.embedded import find_redis_server

        candidate = os.path.join(os.path.dirname(find_redis_server()), "redis-benchmark")
    except Exception:
        return None
    return candidate if os.access(candidate, os.X_OK) else None


def redis_benchmark(port: int, requests: int, keyspace: int = 100_000) -> dict[str, float]:
    """Requests/s of each command in :data:`COMMANDS` (one client, ``-P 64``).

    Args:
        port: the server's port on 127.0.0.1.
        requests: requests per command.
        keyspace: range of the random ids.

    Returns:
        ``{"HSET": rps, ...}``; empty when redis-benchmark is missing.
    """
    binary = find_redis_benchmark()
    if binary is None:
        return {}
    rates: dict[str, float] = {}
    for name, args in COMMANDS.items():
        out = subprocess.run(
            [binary, "-h", "127.0.0.1", "-p", str(port), "-c", "1", "-P", str(PIPELINE),
             "-n", str(requests), "-r", str(keyspace), "--csv", *args],
            capture_output=True, text=True, timeout=120, check=True,
        ).stdout
        # The test name column may hold unescaped quotes: read the figures from the right.
        last = [line for line in out.splitlines() if line.strip()][-1]
        rates[name] = float(last.rsplit(",", 7)[1].strip('"'))
    return rates


def mix_rate(rates: dict[str, float], mix: str) -> float:
    """Messages/s for a mix: 1 / (sum of 1 / rate of each command); NaN if a rate is missing."""
    try:
        return 1.0 / sum(1.0 / rates[c] for c in MIXES[mix])
    except (KeyError, ZeroDivisionError):
        return float("nan")


def raw_python(client: Any, n: int) -> dict[str, float]:
    """The mixes as plain pipelined redis-py commands, BATCH messages per round trip.

    Args:
        client: a redis-py client of the server (keys ``raw:*`` are used, then deleted).
        n: messages.

    Returns:
        ``{"push": msgs/s, "pop+ack": msgs/s}``.
    """
    body = '{"id":"m","payload":"' + PAD * 2 + '"}'
    ids = [f"r{i}" for i in range(n)]
    due = time.time() * 1000
    started = time.perf_counter()
    for i in range(0, n, BATCH):
        pipe = client.pipeline(transaction=False)
        for id_ in ids[i:i + BATCH]:
            pipe.hset("raw:h", id_, body)
            pipe.zadd("raw:q", {id_: due})
        pipe.execute()
    push = n / (time.perf_counter() - started)
    started = time.perf_counter()
    while True:
        batch = client.zrangebyscore("raw:q", "-inf", due + 1, start=0, num=BATCH)
        if not batch:
            break
        pipe = client.pipeline(transaction=False)
        for id_ in batch:
            pipe.hget("raw:h", id_)
            pipe.zrem("raw:q", id_)
            pipe.zadd("raw:u", {id_: due + 60_000})
        pipe.execute()
        pipe = client.pipeline(transaction=False)
        for id_ in batch:
            pipe.zrem("raw:u", id_)
            pipe.hdel("raw:h", id_)
        pipe.execute()
    pop_ack = n / (time.perf_counter() - started)
    client.delete("raw:h", "raw:q", "raw:u")
    return {"push": push, "pop+ack": pop_ack}
