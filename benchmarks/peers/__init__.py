"""Adapters that drive dynoqueue and its peers through their public APIs.

Peer modules are imported only when asked for (:func:`load`), so a missing peer package only
turns that peer's figures into "n/a".
"""

from __future__ import annotations

import importlib
from typing import Any

from .base import Adapter, AsyncAdapter, NotSupported, OnBatch

#: name -> (module, class). dynoqueue's two APIs first; the peers in the order the report
#: shows them.
ADAPTERS: dict[str, tuple[str, str]] = {
    "dynoqueue": ("dynoqueue_adapter", "DynoqueueAdapter"),
    "dynoqueue.asyncio": ("dynoqueue_async", "AsyncDynoqueueAdapter"),
    "bullmq": ("bullmq_peer", "BullmqAdapter"),
    "rq": ("rq_peer", "RqAdapter"),
    "dramatiq": ("dramatiq_peer", "DramatiqAdapter"),
    "huey": ("huey_peer", "HueyAdapter"),
    "saq": ("saq_peer", "SaqAdapter"),
}
PEERS = [name for name in ADAPTERS if not name.startswith("dynoqueue")]
#: The adapters that drive an asyncio API (AsyncAdapter subclasses): the asyncio workloads.
ASYNCIO = ["dynoqueue.asyncio", "bullmq", "saq"]


def load(name: str) -> type[Adapter]:
    """The adapter class for ``name`` (imports the library).

    Raises:
        KeyError: unknown name. ImportError: the library is not installed.
    """
    module, cls = ADAPTERS[name]
    found: Any = getattr(importlib.import_module(f"{__name__}.{module}"), cls)
    return found  # type: ignore[no-any-return]


__all__ = ["ADAPTERS", "ASYNCIO", "PEERS", "Adapter", "AsyncAdapter", "NotSupported", "OnBatch",
           "load"]
