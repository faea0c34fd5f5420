"""A real Spark standalone cluster (master + 2 workers, executors in their own JVMs) writes into
and reads from a partitioned queue on a real 3-primary Redis Cluster: benchmarks/spark_scale.py
end to end at a small size, in a process of its own (one SparkSession per driver process, and
this session's tests hold a local one)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_standalone_cluster_writes_and_reads_every_row_once() -> None:
    done = subprocess.run([sys.executable, "-m", "benchmarks.spark_scale", "--rows", "6000",
                           "--partitions", "12", "--workers", "2"], cwd=ROOT,
                          capture_output=True, text=True, timeout=360)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    table = [line.split() for line in done.stdout.splitlines()
             if line.strip().startswith(("12 ", "1 "))]
    assert [row[0] for row in table] == ["12", "1"]
    for row in table:  # partitions, write s, rows/s, read tasks, rows read, distinct, read s
        assert row[4] == row[5] == "6,000"
    assert int(table[0][3]) >= 12
