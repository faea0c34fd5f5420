"""Interleaved A/B of the push workloads: dynoqueue one message per call (sync), huey's
single enqueue, dynoqueue.asyncio one per call from 100 tasks, and batched pushes (both APIs),
for one or more source trees, on one redis-server.

Each round runs one child process per tree (the order alternates between rounds), so a change
in machine load hits every tree alike; a child imports ``dynoqueue`` and ``benchmarks`` from
its tree (``PYTHONPATH``), runs every case once and prints one JSON line. Besides the rate
(msgs/s, wall clock) each case reports the client's CPU per message (``time.process_time``,
which ignores other tenants) and the server's script time per message (``INFO commandstats``
usec of evalsha/eval, for huey of every command), the load-robust measures.

    python -m benchmarks.push_ab --trees /tmp/old,. --rounds 5

A tree must hold ``benchmarks/workloads.py`` and the adapters (any tree since issue 9 does).
The ``paired`` case runs the one-per-call pushes of dynoqueue and huey's enqueues in
alternating blocks of 500 on open connections (a load change then hits both sides of a block
pair alike) and reports the median per-pair rate ratio; the trees' older harness has none.
Keep runs short: the defaults take ~10-15 s per child.
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

#: Messages per case (one per call / 100 tasks / bulk) and huey's one per call.
SIZES = {"one": 10_000, "tasks": 10_000, "bulk": 50_000, "huey": 5_000}
DELAY_MS = 3_600_000
TASKS = 100


def _server_usec(admin: Any, huey: bool = False) -> float:
    total = 0.0
    for key, value in admin.info("commandstats").items():
        name = key.removeprefix("cmdstat_").lower()
        if name in ("evalsha", "eval") or (huey and name in ("lpush", "rpush", "zadd")):
            total += float(value["usec"])
    return total


def _case(url: str, admin: Any, name: str, n: int, mode: str) -> dict[str, float]:
    """One timed enqueue of ``n`` items through adapter ``name`` (as workloads.enqueue)."""
    from benchmarks.common import items
    from benchmarks.peers import load

    admin.flushall()
    adapter: Any = load(name)(url)
    try:
        batch = items(n, DELAY_MS, prefix="e")
        if mode == "tasks":
            adapter.enqueue_concurrently(items(TASKS, DELAY_MS, prefix="w"), TASKS)
        else:  # warm: connection opened, scripts loaded
            adapter.enqueue(items(1, DELAY_MS, prefix="w"), False)
        admin.config_resetstat()
        cpu, wall = time.process_time(), time.perf_counter()
        if mode == "tasks":
            adapter.enqueue_concurrently(batch, TASKS)
        else:
            adapter.enqueue(batch, mode == "bulk")
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        server = _server_usec(admin, huey=name == "huey")
    finally:
        adapter.close()
    return {"rate": n / wall, "client_us": cpu / n * 1e6, "server_us": server / n}


def _paired(url: str, admin: Any, blocks: int = 12, size: int = 500) -> dict[str, float]:
    """dynoqueue one-per-call pushes and huey enqueues in alternating blocks of ``size`` on
    open connections: the per-block-pair rate ratio (dynoqueue / huey) follows load changes
    that fall between the two cases' separate runs. Returns the median ratio and each side's
    median client CPU per message."""
    from benchmarks.common import items
    from benchmarks.peers import load

    admin.flushall()
    sides: dict[str, Any] = {"dq": load("dynoqueue")(url), "huey": load("huey")(url)}
    try:
        for name, adapter in sides.items():
            adapter.enqueue(items(200, DELAY_MS, prefix=f"w{name}"), False)
        walls: dict[str, list[float]] = {"dq": [], "huey": []}
        cpus: dict[str, list[float]] = {"dq": [], "huey": []}
        for block in range(blocks):
            order = ("dq", "huey") if block % 2 == 0 else ("huey", "dq")
            for name in order:
                batch = items(size, DELAY_MS, prefix=f"p{name}{block}-")
                cpu, wall = time.process_time(), time.perf_counter()
                sides[name].enqueue(batch, False)
                walls[name].append(time.perf_counter() - wall)
                cpus[name].append((time.process_time() - cpu) / size * 1e6)
    finally:
        for adapter in sides.values():
            adapter.close()
    return {"ratio": statistics.median(h / d for d, h in zip(walls["dq"], walls["huey"],
                                                              strict=True)),
            "dq_client_us": statistics.median(cpus["dq"]),
            "huey_client_us": statistics.median(cpus["huey"])}


def child(url: str) -> dict[str, Any]:
    """Every case once, on the server at ``url``."""
    import redis

    admin = redis.Redis.from_url(url, decode_responses=True)
    # Untimed: a fresh process on an idle machine runs its first seconds slower (~2x: cores
    # waking up), which would count against whichever case came first.
    _case(url, admin, "dynoqueue", 2_000, "one")
    _case(url, admin, "huey", 1_000, "one")
    out = {
        "one": _case(url, admin, "dynoqueue", SIZES["one"], "one"),
        "huey": _case(url, admin, "huey", SIZES["huey"], "one"),
        "tasks": _case(url, admin, "dynoqueue.asyncio", SIZES["tasks"], "tasks"),
        "bulk": _case(url, admin, "dynoqueue", SIZES["bulk"], "bulk"),
        "abulk": _case(url, admin, "dynoqueue.asyncio", SIZES["bulk"], "bulk"),
        "paired": _paired(url, admin),
    }
    admin.close()
    return out


def _ratios(r: dict[str, Any]) -> dict[str, float]:
    paired = {"one/huey paired": r["paired"]["ratio"]} if "paired" in r else {}
    return {**paired, "one/huey": r["one"]["rate"] / r["huey"]["rate"],
            "tasks/one": r["tasks"]["rate"] / r["one"]["rate"],
            "abulk/bulk": r["abulk"]["rate"] / r["bulk"]["rate"]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trees", default=".", help="comma-separated source trees")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child)))
        return
    from dynoqueue.embedded import single

    trees = [os.path.abspath(t) for t in args.trees.split(",")]
    runs: dict[str, list[dict[str, Any]]] = {t: [] for t in trees}
    with single() as server:
        url = f"redis://127.0.0.1:{server.port}/0"
        for rnd in range(args.rounds):
            order = trees if rnd % 2 == 0 else trees[::-1]
            for tree in order:
                env = {**os.environ, "PYTHONPATH": tree}
                out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", url],
                                     env=env, cwd=tree, capture_output=True, text=True,
                                     check=False)
                if out.returncode:
                    sys.exit(f"{tree}: {out.stderr[-2000:]}")
                result = json.loads(out.stdout.strip().splitlines()[-1])
                runs[tree].append(result)
                line = " ".join(f"{k}={v['rate']:,.0f}/{v['client_us']:.1f}us/"
                                f"{v['server_us']:.1f}us" for k, v in result.items()
                                if k != "paired")
                ratio = " ".join(f"{k}={v:.2f}x" for k, v in _ratios(result).items())
                print(f"round {rnd} {os.path.basename(tree)}: {line} | {ratio} "
                      f"load={os.getloadavg()[0]:.2f}", flush=True)
    print("medians (rate msgs/s, client CPU us/msg, server us/msg; ratios per round):")
    for tree, results in runs.items():
        med = {case: {m: statistics.median(r[case][m] for r in results)
                      for m in ("rate", "client_us", "server_us")}
               for case in results[0] if case != "paired"}
        ratios = {k: statistics.median(_ratios(r)[k] for r in results) for k in _ratios(results[0])}
        print(f"  {tree}:")
        for case, v in med.items():
            print(f"    {case:6s} {v['rate']:>9,.0f}  {v['client_us']:6.1f}  {v['server_us']:6.1f}")
        print("    " + "  ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))


if __name__ == "__main__":
    main()
