"""Spark at scale: a real Spark standalone cluster writes N rows into a queue on an embedded Redis
Cluster, with 12 partitions and with 1, then reads them back.

    python -m benchmarks.spark_scale [--rows 10000000] [--partitions 12] [--workers 2]
                                     [--repeats 3]
    make spark-scale ARGS="--rows 1000000"

The Spark cluster is a master and ``--workers`` workers, each a JVM of its own with its own
executor JVM (:class:`dynoqueue.spark.standalone.StandaloneSpark`), not ``local[*]``: the data
source's writer and reader are pickled to the executors as ``spark-submit`` users run them. The
Redis Cluster has 3 primaries (no replicas, persistence off). The writes alternate between the
two partition counts, ``--repeats`` times each, every one into a fresh queue on an emptied
Cluster; a count's write rate is the median of its writes. Whichever write runs first pays
for the JVMs' warm-up (a first 300,000-row write ran ~20% slower than the same write later), so
one write per count measured the order, not the layout. The last write of each count is read
back: the read's planned tasks (one per partition at least), and that it returned every row
once (distinct ids == rows). Each write also reports the Redis CPU it cost (INFO cpu of every
primary) and how busy the busiest primary was (its CPU seconds over the write's seconds): a
write into 1 partition is bound by its one primary only when that one nears 100%. The write
into ``--partitions`` is compared with the write into 1 partition (the issue's goal: >= 1.5x).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from dynoqueue.embedded import ClusterTopology
from dynoqueue.spark.standalone import StandaloneSpark


def _redis_cpu(primaries: list[Any]) -> list[float]:
    """CPU seconds (user + sys) each primary has used so far."""
    return [float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
            for info in (server.info("cpu") for server in primaries)]


def _machine_cpu() -> tuple[float, float] | None:
    """(busy, total) CPU seconds of the whole machine so far, from /proc/stat (None elsewhere):
    a write that keeps every core busy is bound by the machine, whatever the layout."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [float(v) for v in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    return (sum(fields) - idle) / ticks, sum(fields) / ticks


def measure(spark: Any, rc: Any, rows: int, partitions: int, slices: int, run: int,
            read: bool) -> dict[str, Any]:
    """Write ``rows`` rows into a fresh queue of ``partitions`` partitions (and read them back
    when ``read``), on an emptied Cluster."""
    for server in rc.primaries:
        with server.client() as client:
            client.flushall()
    options = {"url": rc.url, "queue": f"scale-{partitions}-{rows}-{run}",
               "keyPrefix": "sparkscale", "partitions": str(partitions)}
    frame = spark.range(0, rows, 1, slices).selectExpr("concat('m', id) AS id",
                                                        "'x' AS payload")
    cpu_before, machine_before = _redis_cpu(rc.primaries), _machine_cpu()
    started = time.perf_counter()
    frame.write.format("dynoqueue").options(**options).mode("append").save()
    write_s = time.perf_counter() - started
    machine_after = _machine_cpu()
    cpu = [after - before for after, before in zip(_redis_cpu(rc.primaries), cpu_before,
                                                   strict=True)]
    result: dict[str, Any] = {"partitions": partitions, "write_s": write_s,
                              "write_rate": rows / write_s, "redis_cpu_s": sum(cpu),
                              "busiest": max(cpu) / write_s,
                              "machine_busy": None, "cpu_us_per_row": None}
    if machine_before is not None and machine_after is not None:
        busy = machine_after[0] - machine_before[0]
        total = machine_after[1] - machine_before[1]
        result.update(machine_busy=busy / total if total else None,
                      cpu_us_per_row=busy / rows * 1e6)
    if read:
        started = time.perf_counter()
        frame = spark.read.format("dynoqueue").options(**options).load()
        tasks = frame.rdd.getNumPartitions()
        counted = frame.selectExpr("count(*) AS n", "count(DISTINCT id) AS d").collect()[0]
        result.update(read_tasks=tasks, rows_read=int(counted["n"]),
                      distinct=int(counted["d"]), read_s=time.perf_counter() - started)
    return result


def run(rows: int, partitions: int, workers: int, repeats: int = 3,
        primaries: int = 3) -> list[dict[str, Any]]:
    """The writes (alternating counts, ``repeats`` each) and the reads of the last ones, on one
    Spark cluster and one Redis Cluster; one dict per count: the median write, its runs' rates
    in ``rates``, the read of its last write."""
    with ClusterTopology(primaries, 0, extra_args=["--save", "", "--appendonly", "no"]) as rc, \
            StandaloneSpark(workers=workers) as cluster:
        spark = cluster.session("dynoqueue-spark-scale")
        try:
            slices = max(workers * 4, partitions)
            counts = (partitions, 1)
            # Warm-up: every executor starts its Python workers and imports the data source,
            # and both layouts run once, before the clock runs for either count.
            for count in counts:
                measure(spark, rc, 2_000, count, slices, -1, read=False)
            runs: dict[int, list[dict[str, Any]]] = {count: [] for count in counts}
            for repeat in range(repeats):
                for count in counts:
                    runs[count].append(measure(spark, rc, rows, count, slices, repeat,
                                               read=repeat == repeats - 1))
            results = []
            for count in counts:
                done = runs[count]
                median = sorted(done, key=lambda r: r["write_rate"])[(len(done) - 1) // 2]
                results.append({**median, **{k: done[-1][k] for k in
                                             ("read_tasks", "rows_read", "distinct", "read_s")},
                                "rates": [r["write_rate"] for r in done]})
            return results
        finally:
            spark.stop()


def report(rows: int, results: list[dict[str, Any]], workers: int) -> str:
    repeats = len(results[0]["rates"])
    lines = [f"Spark standalone ({workers} workers, one executor each) on 3 Redis primaries: "
             f"{rows:,} rows, median of {repeats} writes per count", "",
             f"{'partitions':>10} {'write s':>8} {'rows/s':>10} {'read tasks':>10} "
             f"{'rows read':>11} {'distinct':>11} {'read s':>7} {'redis cpu s':>11} "
             f"{'busiest primary':>15}"]
    for r in results:
        lines.append(f"{r['partitions']:>10} {r['write_s']:>8.1f} {r['write_rate']:>10,.0f} "
                     f"{r['read_tasks']:>10} {r['rows_read']:>11,} {r['distinct']:>11,} "
                     f"{r['read_s']:>7.1f} {r['redis_cpu_s']:>11.2f} {r['busiest']:>15.0%}")
    for r in results:
        lines.append(f"write rates into {r['partitions']} partition(s), in run order: "
                     + ", ".join(f"{rate:,.0f}" for rate in r["rates"]))
    for r in results:
        if r.get("machine_busy") is not None:
            # Every process's CPU (executors, JVMs, Redis): at ~100% busy the write is bound by
            # the machine's cores, and N partitions can only go faster with more of them.
            lines.append(f"machine while writing into {r['partitions']} partition(s): "
                         f"{r['machine_busy']:.0%} of {os.cpu_count()} cores busy, "
                         f"{r['cpu_us_per_row']:.1f} CPU us per row (all processes)")
    many, one = results[0], results[-1]
    lines.append(f"write into {many['partitions']} partitions: "
                 f"{many['write_rate'] / one['write_rate']:.2f}x the write into 1")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.spark_scale",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3,
                        help="writes per partition count (alternating); the median counts")
    options = parser.parse_args(argv)
    if options.repeats < 1:
        parser.error("--repeats must be >= 1")
    results = run(options.rows, options.partitions, options.workers, options.repeats)
    print(report(options.rows, results, options.workers))
    whole = all(r["rows_read"] == r["distinct"] == options.rows for r in results)
    return 0 if whole and results[0]["read_tasks"] >= options.partitions else 1


if __name__ == "__main__":
    sys.exit(main())
