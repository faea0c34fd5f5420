"""What both DynoQueue classes (the sync façade and the asyncio one) share: the queue's
attributes, the core their calls run on, and switching to the core a stored policy names."""

from __future__ import annotations

from typing import Any, cast

from .layout import AnyCore, Discovering
from .queue import QueueCore


class QueueBase:
    """The attributes of one queue façade; every call goes to its :class:`QueueCore`.

    Attributes:
        name: the queue name.
        unack_timeout_ms: the lease a pop takes on each message, in milliseconds.
        shards: all shard names. ``local_shard``: the shard pops and peeks act on.
        keys: the queue's Redis key names (:class:`dynoqueue.model.keys.QueueKeys`).
    """

    def __init__(self, core: AnyCore) -> None:
        #: The core this façade's calls run on: replaced by the one the stored policy names
        #: once a Discovering core has read it (see :meth:`_found`). Typed as QueueCore: the
        #: other two have its operations, with the same arguments and results.
        self._core = cast(QueueCore, core)
        self.name = core.name
        self.keys = core.keys
        self.shards = core.shards
        self.local_shard = core.local_shard
        self.unack_timeout_ms = core.unack_timeout_ms

    def _found(self, core: AnyCore) -> None:
        """Run this façade's calls on ``core`` (the layout its Discovering core found)."""
        self._core = cast(QueueCore, core)

    def _bell_cores(self) -> list[Any]:
        """The cores whose doorbells a close stops (a Discovering core may have served calls
        through two)."""
        core: Any = self._core
        return core.cores() if isinstance(core, Discovering) else [core]

    @property
    def closed(self) -> bool:
        """True once :meth:`close` (or the factory's close) was called."""
        return self._core.closed

    def __repr__(self) -> str:
        return repr(self._core)
