"""A lean local SparkSession for the demo and the tests, with the ``dynoqueue`` format registered.

Settings follow the PySpark notes of this project: workers run this interpreter
(``PYSPARK_PYTHON``), no UI, no console progress bars, few shuffle partitions, loopback driver
address, UTC session time zone, a quick-starting JVM (C1 only, serial GC) and error-level logs.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import warnings
from typing import Any

from ..errors import ConfigurationError

_QUIET_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = stderr
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""

#: Spark's own settings for a small local session (see the module docstring).
LOCAL_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.session.timeZone": "UTC",
    # Python workers are reused between tasks: no new interpreter (and imports) per task.
    "spark.python.worker.reuse": "true",
}

_JVM_FLAGS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def check_java() -> None:
    """Check that a Java runtime can be found (Spark 4 needs Java 17 or 21).

    Raises:
        ConfigurationError: neither ``$JAVA_HOME/bin/java`` nor ``java`` on PATH exists.
    """
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return
    if shutil.which("java") is None:
        raise ConfigurationError(
            "Spark needs a Java 17+ runtime: install one (e.g. apt-get install "
            "openjdk-17-jre-headless, or `make java`) or set JAVA_HOME"
        )


def local_session(app_name: str = "dynoqueue", master: str = "local[2]",
                  conf: dict[str, str] | None = None) -> Any:
    """Start (or get) a quiet local SparkSession and register the ``dynoqueue`` format.

    Sets ``PYSPARK_PYTHON`` / ``PYSPARK_DRIVER_PYTHON`` to this interpreter unless already set,
    so workers find pyarrow and dynoqueue. JVM flags and the log configuration only apply when
    this call starts the JVM (the first session of the process).

    Args:
        app_name: the Spark application name.
        master: the Spark master, default ``local[2]``.
        conf: extra Spark settings, applied after :data:`LOCAL_CONF`.

    Returns:
        The ``pyspark.sql.SparkSession``.

    Raises:
        ConfigurationError: no Java runtime, or pyarrow is missing.
        ImportError: pyspark is not installed (``pip install 'dynoqueue[spark]'``).
    """
    check_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # pyspark warns about pandas >= 3 on import; neither the data source nor the demo use pandas.
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas",
                            category=FutureWarning)
    from pyspark.sql import SparkSession

    from .source import register

    log_dir = tempfile.mkdtemp(prefix="dynoqueue-spark-log4j-")
    atexit.register(shutil.rmtree, log_dir, ignore_errors=True)
    log_file = os.path.join(log_dir, "log4j2.properties")
    with open(log_file, "w", encoding="utf-8") as handle:
        handle.write(_QUIET_LOG4J)
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {**LOCAL_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    builder = builder.config("spark.driver.extraJavaOptions",
                             f"{_JVM_FLAGS} -Dlog4j2.configurationFile=file:{log_file}")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
