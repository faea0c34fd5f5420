"""The physical limit: what Redis itself does with the commands one message needs.

Three measures on the same server:

* server-side (:func:`lua_limit`): the command mix of 500 messages run inside one Lua call,
  so neither the network, the protocol nor a client costs anything: the server's own
  execution limit for these commands, the ceiling of any Lua-batched design.
* ``redis-benchmark`` (the C client shipped with Redis, one connection, pipelined 64): the rate
  of each bare command, combined into messages/s for a mix by adding the per-command times
  (1 / sum(1 / rate)): the limit for commands sent one by one.
* a raw redis-py loop: the same commands, pipelined in batches from Python, non-atomic and
  without any queue logic: what any Python client reaches with plain commands.

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


_PUSH_LUA = """
local base = tonumber(ARGV[2])
for i = 1, tonumber(ARGV[3]) do
  local id = 'l' .. (base + i)
  redis.call('HSET', KEYS[1], id, ARGV[1])
  redis.call('ZADD', KEYS[2], ARGV[4], id)
end
return 1
"""
_POP_ACK_LUA = """
local ids = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(ids) do
  redis.call('HGET', KEYS[1], id)
  redis.call('ZREM', KEYS[2], id)
  redis.call('ZADD', KEYS[3], ARGV[3], id)
end
for _, id in ipairs(ids) do
  redis.call('ZREM', KEYS[3], id)
  redis.call('HDEL', KEYS[1], id)
end
return #ids
"""


def lua_limit(client: Any, n: int) -> dict[str, float]:
    """The mixes run by the server alone: one Lua call per BATCH messages, calls back to back.

    Args:
        client: a redis-py client of the server (keys ``lua:*``, deleted afterwards).
        n: messages (rounded up to whole batches).

    Returns:
        ``{"push": msgs/s, "pop+ack": msgs/s}`` (one round trip per BATCH messages included).
    """
    push = client.register_script(_PUSH_LUA)
    pop_ack = client.register_script(_POP_ACK_LUA)
    keys = ["lua:h", "lua:q", "lua:u"]
    body = "v" * 60
    calls = max(1, -(-n // BATCH))
    push(keys=keys, args=[body, -BATCH, 0, 0])  # load the script before timing
    started = time.perf_counter()
    for c in range(calls):
        push(keys=keys, args=[body, c * BATCH, BATCH, 1000])
    push_rate = calls * BATCH / (time.perf_counter() - started)
    started = time.perf_counter()
    moved = 0
    while True:
        got = int(pop_ack(keys=keys, args=[2000, BATCH, 99_000]))
        moved += got
        if got < BATCH:
            break
    pop_rate = moved / (time.perf_counter() - started)
    client.delete(*keys)
    return {"push": push_rate, "pop+ack": pop_rate}


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
