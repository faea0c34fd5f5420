"""Spark finds the ``dynoqueue`` format on its own: PySpark 4's worker lists top-level modules
named ``pyspark_*`` (pkgutil.iter_modules) and registers their ``DefaultSource``."""

from __future__ import annotations

import pkgutil


def test_the_format_is_discoverable_without_register() -> None:
    found = {m.name for m in pkgutil.iter_modules() if m.name.startswith("pyspark_")}
    assert "pyspark_dynoqueue" in found
    from pyspark.sql.datasource import DataSource

    import pyspark_dynoqueue

    assert issubclass(pyspark_dynoqueue.DefaultSource, DataSource)
    assert pyspark_dynoqueue.DefaultSource.name() == "dynoqueue"
