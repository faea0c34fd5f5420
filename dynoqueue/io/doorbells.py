"""What the doorbells of both drivers share: one doorbell per queue (made on first use), the
sharded (SSUBSCRIBE) subscription of a Cluster, and the state every doorbell holds. The
listener loops themselves are in thread_doorbell.py and task_doorbell.py."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from ..core import doorbell as bell
from ..core.queue import QueueCore
from .cluster import slot_map

B = TypeVar("B")


class Doorbells(Generic[B]):
    """One doorbell per queue, made on first use by ``make(conn, channels, enabled)``."""

    def __init__(self, make: Callable[[Any, list[str], bool], B], conn: Any) -> None:
        self._make = make
        self._conn = conn
        self._bells: dict[QueueCore, B] = {}
        self._lock = threading.Lock()

    def get(self, core: QueueCore) -> B:
        """The doorbell of ``core``'s queue (not yet subscribed, when new). A closed queue gets
        one without a listener, kept nowhere: a pop that the close woke asks once more before
        its claim sees the close, and nothing it starts may outlive the close."""
        with self._lock:
            bell = self._bells.get(core)
            if bell is None:
                if core.closed or core.detached:
                    return self._make(self._conn, core.bell_channels, False)
                bell = self._bells[core] = self._make(self._conn, core.bell_channels,
                                                      core.settings.doorbell)
            return bell

    def existing(self, core: QueueCore) -> B | None:
        """The doorbell of ``core``'s queue if it has one (None: none made yet)."""
        with self._lock:
            return self._bells.get(core)

    def pop(self, core: QueueCore) -> B | None:
        """Forget ``core``'s doorbell and return it (None if it had none), to be closed."""
        with self._lock:
            return self._bells.pop(core, None)


class Sharded:
    """A doorbell subscription made with SSUBSCRIBE: a Cluster pub/sub holding one
    subscription per node that owns some of the channels. redis-py's ``get_sharded_message``
    waits on each node in turn, the timeout on each, so a ring on the last node waited for the
    others' timeouts (0.2 s measured on 3 nodes): the doorbells read the nodes at once instead
    (the sync one with select(), the asyncio one with a reader task per node, ``readers``)."""

    __slots__ = ("messages", "pubsub", "readers")

    def __init__(self, pubsub: Any) -> None:
        self.pubsub = pubsub
        self.readers: list[Any] = []
        self.messages: Any = None

    def node_pubsubs(self) -> list[Any]:
        """The per-node subscriptions."""
        return list(self.pubsub.node_pubsub_mapping.values())


def sharded(conn: Any, pubsub: Any) -> bool:
    """Whether a doorbell on ``conn`` uses sharded pub/sub: a Cluster client whose ``pubsub``
    has SSUBSCRIBE (the scripts then SPUBLISH: see scripts/lib/doorbell.lua)."""
    return slot_map(conn) is not None and hasattr(pubsub, "ssubscribe")


def lacks_sharded(error: Exception) -> bool:
    """Whether ``error`` says the server has no sharded pub/sub (Redis < 7)."""
    return "unknown command" in str(error).lower()


class DoorbellBase:
    """What a doorbell of either API holds: the client it subscribes through, its ring counts,
    and whether it is enabled (False for servers without pub/sub: waiting pops only poll)."""

    def __init__(self, conn: Any, channels: Sequence[str], enabled: bool = True) -> None:
        self.enabled = enabled
        self.rings = bell.Rings(channels)
        self._conn = conn
