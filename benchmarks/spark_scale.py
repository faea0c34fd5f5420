"""Spark at scale: a real Spark standalone cluster writes N rows into a queue on an embedded Redis
Cluster, with 12 partitions and with 1, then reads them back.

    python -m benchmarks.spark_scale [--rows 10000000] [--partitions 12] [--workers 2]
    make spark-scale ARGS="--rows 1000000"

The Spark cluster is a master and ``--workers`` workers, each a JVM of its own with its own
executor JVM (:class:`dynoqueue.spark.standalone.StandaloneSpark`), not ``local[*]``: the data
source's writer and reader are pickled to the executors as ``spark-submit`` users run them. The
Redis Cluster has 3 primaries (no replicas, persistence off). For each partition count: rows/s of
the write, the read's planned tasks (one per partition at least), and that the read returned
every row once (distinct ids == rows). The write into ``--partitions`` is compared with the
write into 1 partition of the same cluster (the issue's goal: >= 1.5x).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from dynoqueue.embedded import ClusterTopology
from dynoqueue.spark.standalone import StandaloneSpark


def measure(spark: Any, url: str, rows: int, partitions: int, slices: int) -> dict[str, Any]:
    """Write ``rows`` rows into a fresh queue of ``partitions`` partitions, then read them."""
    options = {"url": url, "queue": f"scale-{partitions}-{rows}", "keyPrefix": "sparkscale",
               "partitions": str(partitions)}
    frame = spark.range(0, rows, 1, slices).selectExpr("concat('m', id) AS id",
                                                        "'x' AS payload")
    started = time.perf_counter()
    frame.write.format("dynoqueue").options(**options).mode("append").save()
    write_s = time.perf_counter() - started
    started = time.perf_counter()
    read = spark.read.format("dynoqueue").options(**options).load()
    tasks = read.rdd.getNumPartitions()
    counted = read.selectExpr("count(*) AS n", "count(DISTINCT id) AS d").collect()[0]
    read_s = time.perf_counter() - started
    return {"partitions": partitions, "write_s": write_s, "write_rate": rows / write_s,
            "read_tasks": tasks, "rows_read": int(counted["n"]),
            "distinct": int(counted["d"]), "read_s": read_s}


def run(rows: int, partitions: int, workers: int, primaries: int = 3) -> list[dict[str, Any]]:
    """Both writes and reads on one Spark cluster and one Redis Cluster; one dict per count."""
    with ClusterTopology(primaries, 0, extra_args=["--save", "", "--appendonly", "no"]) as rc, \
            StandaloneSpark(workers=workers) as cluster:
        spark = cluster.session("dynoqueue-spark-scale")
        try:
            slices = max(workers * 4, partitions)
            # Warm-up: every executor starts its Python workers and imports the data source
            # before the clock runs for either count.
            measure(spark, rc.url, 2_000, partitions, slices)
            return [measure(spark, rc.url, rows, count, slices) for count in (partitions, 1)]
        finally:
            spark.stop()


def report(rows: int, results: list[dict[str, Any]], workers: int) -> str:
    lines = [f"Spark standalone ({workers} workers, one executor each) on 3 Redis primaries: "
             f"{rows:,} rows", "",
             f"{'partitions':>10} {'write s':>8} {'rows/s':>10} {'read tasks':>10} "
             f"{'rows read':>11} {'distinct':>11} {'read s':>7}"]
    for r in results:
        lines.append(f"{r['partitions']:>10} {r['write_s']:>8.1f} {r['write_rate']:>10,.0f} "
                     f"{r['read_tasks']:>10} {r['rows_read']:>11,} {r['distinct']:>11,} "
                     f"{r['read_s']:>7.1f}")
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
    options = parser.parse_args(argv)
    results = run(options.rows, options.partitions, options.workers)
    print(report(options.rows, results, options.workers))
    whole = all(r["rows_read"] == r["distinct"] == options.rows for r in results)
    return 0 if whole and results[0]["read_tasks"] >= options.partitions else 1


if __name__ == "__main__":
    sys.exit(main())
