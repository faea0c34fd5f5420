"""Spark integration: the ``dynoqueue`` PySpark data source and ``dynoqueue spark-demo``.

Importing this package is light: it does not import pyspark. The names below are loaded on
first use: :func:`register` and :func:`check_format` (from :mod:`dynoqueue.spark.source`, the
data source, which imports pyspark) and :func:`local_session` (:mod:`dynoqueue.spark.session`).
The demo lives in :mod:`dynoqueue.demo.spark_run`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .session import local_session
    from .source import check_format, register

__all__ = ["check_format", "local_session", "register"]

_HOMES = {"check_format": "source", "register": "source", "local_session": "session"}


def __getattr__(name: str) -> Any:
    """Import the module of a public name on first use (PEP 562), so pyspark loads late."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"{__name__}.{home}"), name)
