"""Spark's Python workers and the interpreter: a venv's python run without activating the venv.

Each test runs a driver script in a subprocess with this interpreter (``sys.executable``, e.g.
``.venv/bin/python``) called by its path, ``PATH`` without its directory and no
``PYSPARK_PYTHON``: Spark would start its workers with another ``python3``, which cannot
import dynoqueue and its dependencies. Real local Spark, real redis-server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dynoqueue.embedded import RedisServer

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

_WITH_HELPER = """
import json, sys, warnings
from dynoqueue.spark import local_session

url, prefix = sys.argv[1], sys.argv[2]
spark = local_session("interpreter-test", master="local[1]")
opts = {"url": url, "queue": "q", "keyPrefix": prefix}
rows = [("a", "x", 0), ("b", "y", 5)]
(spark.createDataFrame(rows, "id string, payload string, priority int")
 .write.format("dynoqueue").options(**opts).mode("append").save())
read = sorted((r["id"], r["payload"], r["priority"])
              for r in spark.read.format("dynoqueue").options(**opts).load().collect())
# The pandas filter is narrow: the same warning from code that uses pandas still shows.
warnings.warn_explicit("PySpark does not yet fully support pandas >= 3.0.0 (probe)",
                       FutureWarning, "conversion.py", 1, module="pyspark.sql.pandas.conversion")
import pandas
print(json.dumps({"workers": spark.sparkContext.pythonExec, "read": read,
                  "conf": spark.conf.get("spark.pyspark.python"),
                  "pandas": pandas.__version__}))
spark.stop()
"""

_WITHOUT_HELPER = """
import json, sys
from pyspark.sql import SparkSession
from dynoqueue.errors import ConfigurationError
from dynoqueue.spark import check_format, register

spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.driver.host", "127.0.0.1").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
out = {"workers": spark.sparkContext.pythonExec}
for name, step in (("check", lambda: check_format(spark)), ("register", lambda: register(spark))):
    try:
        step()
        out[name] = None
    except ConfigurationError as exc:
        out[name] = str(exc)
print(json.dumps(out))
spark.stop()
"""


def _run(script: str, tmp_path: Path, *args: str) -> tuple[dict[str, Any], str]:
    """Run ``script`` with this interpreter by path, as a user outside the venv would."""
    here = os.path.dirname(sys.executable)
    path = os.pathsep.join(p for p in ("/usr/local/bin", "/usr/bin", "/bin") if p != here)
    env = {"PATH": path, "HOME": os.environ.get("HOME", str(tmp_path)),
           "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)}
    if "JAVA_HOME" in os.environ:
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    file = tmp_path / "driver.py"
    file.write_text(script, encoding="utf-8")
    done = subprocess.run([sys.executable, str(file), *args], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_local_session_runs_the_workers_on_the_drivers_interpreter(
        redis_server: RedisServer, prefix: str, tmp_path: Path) -> None:
    out, stderr = _run(_WITH_HELPER, tmp_path, redis_server.url, prefix)
    assert out["workers"] == out["conf"] == sys.executable
    assert out["read"] == [["a", "x", 0], ["b", "y", 5]]
    # pandas (>= 3 here, through the spark extra) is installed and the read and write work;
    # pyspark's import-time probe of it stays quiet, a warning from pandas-using code shows.
    assert out["pandas"]
    assert "testing/utils.py" not in stderr
    assert "conversion.py:1: FutureWarning: PySpark does not yet fully support pandas" in stderr


def test_workers_without_dynoqueue_get_advice_instead_of_a_spark_error(tmp_path: Path) -> None:
    out, _ = _run(_WITHOUT_HELPER, tmp_path)
    assert out["workers"] == "python3"  # Spark's default, not this interpreter
    not_found, unimportable = out["check"], out["register"]
    assert not_found is not None and unimportable is not None
    assert "DATA_SOURCE_NOT_FOUND" in not_found
    assert "dynoqueue.spark.register(spark)" in not_found
    assert "cannot import" in unimportable
    for advice in (not_found, unimportable):
        assert f"PYSPARK_PYTHON={sys.executable}" in advice
        assert "Python workers run python3" in advice
