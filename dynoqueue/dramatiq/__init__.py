"""Dramatiq on dynoqueue: :class:`DynoqueueBroker`, a Dramatiq broker backed by dynoqueue queues.

Needs the ``dramatiq`` extra (``pip install dynoqueue[dramatiq]``). Switching an app is one
line::

    broker = DynoqueueBroker("redis://localhost:6379")   # was RedisBroker(...)
    dramatiq.set_broker(broker)

See ``docs/dramatiq.md`` for every option and what changes from dramatiq's RedisBroker.
"""

from __future__ import annotations

try:
    import dramatiq as _dramatiq  # noqa: F401
except ImportError as missing:  # pragma: no cover - depends on the environment
    raise ImportError("dynoqueue.dramatiq needs dramatiq: pip install 'dynoqueue[dramatiq]'"
                      ) from missing

from .broker import DEFAULT_LEASE_MS, DynoqueueBroker
from .consumer import Consumer, DynoMessageProxy

__all__ = ["DEFAULT_LEASE_MS", "Consumer", "DynoMessageProxy", "DynoqueueBroker"]
