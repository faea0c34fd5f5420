"""Lets Spark find the ``dynoqueue`` format without ``spark.dataSource.register``.

PySpark 4 looks up top-level modules named ``pyspark_*`` that define ``DefaultSource``.
"""

from dynoqueue.spark.source import DynoQueueDataSource as DefaultSource

__all__ = ["DefaultSource"]
