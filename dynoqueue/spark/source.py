"""The ``dynoqueue`` PySpark data source: batch and streaming, read and write.

Register it once per session, then use it like any Spark format (options: ``docs/spark.md``)::

    from dynoqueue.spark import register
    register(spark)  # optional when Spark finds the format itself (check_format)
    df.write.format("dynoqueue").option("url", url).option("queue", "q").mode("append").save()
    snapshot = spark.read.format("dynoqueue").option("url", url).option("queue", "q").load()
    dead = (spark.read.format("dynoqueue").option("url", url).option("queue", "q")
            .option("deadLetters", "true").load())
    due = spark.readStream.format("dynoqueue").option("url", url).option("queue", "q").load()
    query = (rows.writeStream.format("dynoqueue").option("url", url).option("queue", "q")
             .option("checkpointLocation", ck).start())

This module holds the format itself (:class:`DynoQueueDataSource`) and its registration. The
read schemas are defined in :mod:`.rows`; the work is done by :mod:`.batch_read`,
:mod:`.dead_letters`, :mod:`.batch_write` and :mod:`.streaming`. Their public names are
re-exported here.

Where code runs (Spark's Python data source model): ``partitions()`` and the stream reader's
offset calls run in a long-lived Python worker of the driver; ``read()`` and ``write()`` run in
executor tasks, each of which opens its own connection (redis-py clients cannot be pickled) and
closes it before returning. No background thread runs anywhere (``unack_handler_interval_ms=0``).
Spark pickles these classes by reference, so they all live at module top level.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from collections.abc import MutableMapping
from typing import Any

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from ..errors import ConfigurationError
from ..model.keys import StreamKeys
from .batch_read import DynoQueueReader, LineRanges, ZsetRange
from .batch_write import (
    WRITE_COLUMNS,
    DynoQueueWriter,
    PartitionWritten,
    WriteColumns,
    push_rows,
)
from .dead_letters import DeadLetterReader, DeadRange
from .options import SourceOptions, ensure_partitions
from .rows import COLUMNS, DEAD_COLUMNS, DEAD_SCHEMA, SCHEMA, check_read_schema, read_schema
from .streaming import DynoQueueStreamReader, DynoQueueStreamWriter, RecordedSlice

__all__ = [
    "COLUMNS",
    "DEAD_COLUMNS",
    "DEAD_SCHEMA",
    "FORMAT",
    "SCHEMA",
    "WRITE_COLUMNS",
    "DeadLetterReader",
    "DeadRange",
    "DynoQueueDataSource",
    "DynoQueueReader",
    "DynoQueueStreamReader",
    "DynoQueueStreamWriter",
    "DynoQueueWriter",
    "LineRanges",
    "PartitionWritten",
    "RecordedSlice",
    "StreamKeys",
    "WriteColumns",
    "ZsetRange",
    "check_format",
    "push_rows",
    "register",
    "require_pyarrow",
]

#: The format name: ``spark.read.format("dynoqueue")``.
FORMAT = "dynoqueue"

def require_pyarrow() -> None:
    """Check that pyarrow is importable (Spark's Python data source workers need it).

    Raises:
        ConfigurationError: pyarrow is missing; the message says what to install.
    """
    if importlib.util.find_spec("pyarrow") is None:
        raise ConfigurationError(
            "the dynoqueue Spark data source needs pyarrow in the driver's and the workers' "
            "Python: pip install 'dynoqueue[spark]' (and make PYSPARK_PYTHON that interpreter)"
        )


def register(spark: Any, *, check: bool = True) -> None:
    """Register the ``dynoqueue`` format with a SparkSession (``spark.dataSource.register``).

    Needed when Spark does not find the format on its own (see :func:`check_format`).

    Args:
        spark: the ``pyspark.sql.SparkSession``.
        check: then run :func:`check_format` (default), so workers that cannot import
            dynoqueue fail here, with advice, rather than at the first ``load()``; the
            workers' start-up (a few seconds) is paid here instead of there.

    Raises:
        ConfigurationError: pyarrow is missing here, or (with ``check``) Spark's Python
            workers cannot import dynoqueue or pyarrow.
    """
    require_pyarrow()
    spark.dataSource.register(DynoQueueDataSource)
    if check:
        check_format(spark)


#: Options of the probe :func:`check_format` loads: parsed, never connected to (``load()``
#: only builds the data source and its schema; ``.invalid`` never resolves, RFC 2606).
_PROBE_OPTIONS = {"url": "redis://format-check.invalid:6379/0", "queue": "format-check"}
_MISSING_MODULE = re.compile(r"No module named '([^']+)'")


def check_format(spark: Any) -> None:
    """Check that ``format("dynoqueue")`` works in a session, without contacting Redis.

    Spark resolves a format in its Python workers: it finds ``dynoqueue`` when the workers'
    interpreter has dynoqueue installed (the top-level module ``pyspark_dynoqueue``), or when
    :func:`register` registered it; either way the workers then import dynoqueue and pyarrow.
    They run ``$PYSPARK_PYTHON`` as it was when the session started, else ``python3`` from
    ``PATH``: often not the interpreter that has dynoqueue (a venv's python run without
    activating the venv). This loads a read with placeholder options, which makes a worker
    build the data source and its schema, and turns Spark's failure into advice.

    Args:
        spark: the ``pyspark.sql.SparkSession``.

    Raises:
        ConfigurationError: Spark finds no format ``dynoqueue`` (DATA_SOURCE_NOT_FOUND), or
            its Python workers cannot import dynoqueue, its dependencies or pyarrow; the
            message names the workers' interpreter and what to do.
    """
    try:
        spark.read.format(FORMAT).options(**_PROBE_OPTIONS).load()
    except Exception as exc:  # Py4JJavaError, AnalysisException: matched by their text
        text = str(exc)
        here = sys.executable
        workers = _worker_python(spark)
        remedy = (f"set PYSPARK_PYTHON={here} before the session starts "
                  "(dynoqueue.spark.local_session() does; a running session keeps its "
                  f"workers), or pip install 'dynoqueue[spark]' into {workers}")
        if "DATA_SOURCE_NOT_FOUND" in text and FORMAT in text:
            raise ConfigurationError(
                f"Spark finds no data source named {FORMAT!r} (DATA_SOURCE_NOT_FOUND): its "
                f"Python workers run {workers}, this driver runs {here}. Call "
                f"dynoqueue.spark.register(spark), and make sure the workers can import "
                f"dynoqueue: {remedy}"
            ) from exc
        missing = _MISSING_MODULE.search(text)
        if missing or "needs pyarrow" in text:
            module = missing.group(1) if missing else "pyarrow"
            raise ConfigurationError(
                f"Spark's Python workers run {workers}, which cannot import {module!r} for "
                f"the {FORMAT!r} format (this driver runs {here}): {remedy}"
            ) from exc
        raise


def _worker_python(spark: Any) -> str:
    """The interpreter Spark starts its Python workers with (as the session fixed it)."""
    try:
        return str(spark.sparkContext.pythonExec)
    except Exception:  # Spark Connect sessions have no SparkContext here
        return os.environ.get("PYSPARK_PYTHON", "python3")


class DynoQueueDataSource(DataSource):
    """The ``dynoqueue`` format. See the module docstring and ``docs/spark.md``.

    Args:
        options: Spark's option map (case-insensitive); parsed at once, so a bad option fails
            ``load()``, ``save()`` or ``start()`` before any task runs.

    Raises:
        ConfigurationError: a missing or malformed option, or pyarrow is missing.
    """

    def __init__(self, options: MutableMapping[str, str]) -> None:
        super().__init__(options)
        require_pyarrow()
        self.parsed = SourceOptions.parse(options)

    @classmethod
    def name(cls) -> str:
        """The format name, ``"dynoqueue"``."""
        return FORMAT

    def schema(self) -> str:
        """The read schema: :data:`SCHEMA` (batch and streaming reads of the queue), or
        :data:`DEAD_SCHEMA` with option ``deadLetters``."""
        return read_schema(self.parsed.dead_letters)

    def reader(self, schema: StructType) -> DynoQueueReader | DeadLetterReader:
        """The batch reader: a snapshot of the queue, or of its dead letters with option
        ``deadLetters``. Raises ConfigurationError for a custom schema."""
        _check_read_schema(schema, self.parsed.dead_letters)
        if self.parsed.dead_letters:
            return DeadLetterReader(self.parsed)
        return DynoQueueReader(self.parsed)

    def writer(self, schema: StructType, overwrite: bool) -> DynoQueueWriter:
        """The batch writer for a DataFrame of ``schema``.

        Raises:
            ConfigurationError: ``overwrite`` (only append is supported), or a column that is
                unknown, missing or of the wrong type (see :meth:`WriteColumns.of`).
        """
        if overwrite:
            raise ConfigurationError(
                "dynoqueue: only mode('append') is supported: a queue is not overwritten "
                "(clear it with DynoQueue.clear() if that is what you want)"
            )
        self._refuse_dead_letters("a write")
        columns = WriteColumns.of(schema)
        ensure_partitions(self.parsed)
        return DynoQueueWriter(self.parsed, columns)

    def streamReader(self, schema: StructType) -> DynoQueueStreamReader:
        """The streaming reader of due messages. Raises ConfigurationError for a custom schema
        or option ``deadLetters``."""
        self._refuse_dead_letters("a streaming read")
        _check_read_schema(schema, False)
        return DynoQueueStreamReader(self.parsed)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DynoQueueStreamWriter:
        """The streaming writer. Raises ConfigurationError as :meth:`writer` does."""
        if overwrite:
            raise ConfigurationError("dynoqueue: only outputMode('append') is supported")
        self._refuse_dead_letters("a streaming write")
        columns = WriteColumns.of(schema)
        ensure_partitions(self.parsed)
        return DynoQueueStreamWriter(self.parsed, columns)

    def _refuse_dead_letters(self, what: str) -> None:
        if self.parsed.dead_letters:
            raise ConfigurationError(
                f"dynoqueue: option 'deadLetters' is for batch reads (spark.read), not {what}"
            )


def _check_read_schema(schema: StructType, dead_letters: bool) -> None:
    check_read_schema(schema.fieldNames(), dead_letters, schema.simpleString())
