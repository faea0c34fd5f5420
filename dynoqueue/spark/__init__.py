"""Spark integration: the ``dynoqueue`` PySpark data source and ``dynoqueue spark-demo``.

Importing this package is light: it does not import pyspark. The data source lives in
:mod:`dynoqueue.spark.source` (imports pyspark), the demo in :mod:`dynoqueue.spark.demo`.
"""

from __future__ import annotations

__all__: list[str] = []
