"""Which core serves a queue: one partition (:class:`~dynoqueue.core.queue.QueueCore`), several
(:class:`~dynoqueue.core.partitioned.PartitionedCore`), or, for a process given no policy, the one
the queue's stored policy names, found at its first call (:class:`Discovering`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..errors import RedisOperationError
from ..model.message import Message
from ..model.policy import QueuePolicy
from ..model.settings import QueueSettings
from .contract import OPERATIONS, QueueOperations
from .failures import guarded
from .partitioned import PartitionedCore
from .queue import QueueCore
from .requests import QUORUM, Op, Run, Sleep, as_op

#: What serves a queue once its layout is known.
Core = QueueCore | PartitionedCore
#: How long a queue with no stored policy is served as one partition before its policy is read
#: again (a process given no policy meets partitions stored later within this time), s.
RECHECK_S = 1.0
#: How often a first call waiting for another's policy lookup checks whether it is done, s.
LOOKUP_POLL_S = 0.002
#: What the factory sets on a core after making it; a core found later gets the same.
_WIRED = ("closed", "detached", "events", "zones", "server_check")
#: The operations a façade or the factory runs (each returns an Op): the contract's.
_OPERATIONS = frozenset(OPERATIONS)

if TYPE_CHECKING:  # mypy checks that both cores keep the contract
    def _keeps_the_contract(plain: QueueCore, partitioned: PartitionedCore
                            ) -> tuple[QueueOperations, QueueOperations]:
        return plain, partitioned


def open_core(name: str, settings: QueueSettings, *, quorum_cluster: bool, replica_reads: bool,
              policy: QueuePolicy | None) -> Core | Discovering:
    """The core of queue ``name`` for a process given ``policy`` (None: the settings'; none
    there either: :class:`Discovering`, which reads the stored one at the first call).

    Raises:
        ConfigurationError: a bad queue name.
    """
    effective = policy if policy is not None else settings.policy
    if effective is not None and effective.partitions > 1:
        return PartitionedCore(name, settings, quorum_cluster=quorum_cluster,
                               replica_reads=replica_reads, policy=effective)
    plain = QueueCore(name, settings, quorum_cluster=quorum_cluster,
                      replica_reads=replica_reads, policy=policy)
    if effective is not None:
        return plain
    return Discovering(plain, lambda stored: PartitionedCore(
        name, settings, quorum_cluster=quorum_cluster, replica_reads=replica_reads,
        policy=stored, stored=True))


class Discovering:
    """The core of a queue whose process was given no policy, until a call reads the stored
    one: a queue stored with partitions gets a PartitionedCore, one stored with one partition
    the one-partition core. Then ``on_found(core)`` is told (the façade and the factory hold
    that core from then on, so later calls pay nothing) and the call runs on it.

    A queue with no policy stored yet (new, or only ever used by processes given none) is
    served by the one-partition core meanwhile, and its policy is read again at most every
    :data:`RECHECK_S` seconds: a consumer started before the first producer of a partitioned
    queue finds the partitions within that time. Attributes are the one-partition core's until
    the layout is known, and what is set is set on it (and copied to a PartitionedCore made
    later).
    """

    _plain: QueueCore
    _partitioned: Callable[[QueuePolicy], PartitionedCore]
    #: The core the stored policy named (None until a call has read one).
    found: Core | None
    #: A call is reading the stored policy (the others wait for it).
    looking: bool
    #: When the policy is read again while none is stored (time.monotonic()).
    recheck_at: float
    on_found: Callable[[Core], None]

    def __init__(self, plain: QueueCore,
                 partitioned: Callable[[QueuePolicy], PartitionedCore]) -> None:
        object.__setattr__(self, "_plain", plain)
        object.__setattr__(self, "_partitioned", partitioned)
        object.__setattr__(self, "found", None)
        object.__setattr__(self, "looking", False)
        object.__setattr__(self, "recheck_at", 0.0)
        #: Told the core once the layout is known.
        object.__setattr__(self, "on_found", lambda core: None)

    def __getattr__(self, name: str) -> Any:
        core = self.found or self._plain
        if name in _OPERATIONS and self.found is None and time.monotonic() >= self.recheck_at:
            return lambda *args, **kwargs: self._after_lookup(name, args, kwargs)
        return getattr(core, name)  # known, or none stored a moment ago: no layer of ours

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "on_found":
            object.__setattr__(self, name, value)
            return
        setattr(self._plain, name, value)
        if self.found is not None and self.found is not self._plain:
            setattr(self.found, name, value)

    def __repr__(self) -> str:
        return repr(self.found or self._plain)

    def cores(self) -> list[Core]:
        """The cores that may have served this queue's calls (each may hold a doorbell to
        close): the one-partition core, and the core found, if another."""
        found = self.found
        return [self._plain] if found is None or found is self._plain else [self._plain, found]

    def push(self, messages: Iterable[Message], if_exists: str = "replace") -> Run[list[str]]:
        """push validates its batch before the lookup (bad input raises before any command),
        then runs on the core found."""
        if self.found is not None or time.monotonic() < self.recheck_at:
            return (self.found or self._plain).push(messages, if_exists)
        batch = self._plain.prepare_push(messages, if_exists)
        self._plain.check_open()
        return self._after_lookup("push_validated", (batch, if_exists), {})

    def _after_lookup(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Op[Any]:
        plain = self._plain
        was_open = not (plain.closed or plain.detached)
        try:
            core = yield from self.lookup(name)
        except RedisOperationError:
            if name == "pop" and was_open and (plain.closed or plain.detached):
                return []  # close() cut the read's connection: released, as below
            raise
        if name == "pop" and was_open and (core.closed or core.detached):
            # Closed while this pop read the policy: released as a waiting pop is by close()
            # (a slow first read on a Cluster left it short of its wait).
            return []
        return (yield from as_op(getattr(core, name)(*args, **kwargs)))

    def lookup(self, operation: str) -> Op[Core]:
        """The core the stored policy names: read it unless known (or none was stored a moment
        ago). Concurrent calls wait for the one read under way instead of each sending its
        own: a burst of 200 first pops on a fresh asyncio Cluster client broke its
        connections."""
        plain: QueueCore = self._plain
        plain.check_attached()
        if self.found is not None:
            return self.found
        if time.monotonic() < self.recheck_at:
            return plain
        key = plain.keys.policy
        core: Core = yield from guarded(operation, key, self._look_up(key))
        return core

    def _look_up(self, key: str) -> Op[Core]:
        while self.looking and self.found is None:
            yield Sleep(LOOKUP_POLL_S)
        if self.found is not None:
            return self.found
        plain = self._plain
        if time.monotonic() < self.recheck_at:  # another call has just read it
            return plain
        object.__setattr__(self, "looking", True)
        try:
            raw = yield from plain.sender.command(QUORUM, "GET", key)
        finally:
            object.__setattr__(self, "looking", False)
        if self.found is not None:  # a concurrent first call found it meanwhile
            return self.found
        if raw is None:
            object.__setattr__(self, "recheck_at", time.monotonic() + RECHECK_S)
            return plain
        stored = QueuePolicy.from_json(raw)
        core: Core = plain
        if stored.partitions > 1:
            core = self._partitioned(stored)
            for attr in _WIRED:
                setattr(core, attr, getattr(plain, attr))
        object.__setattr__(self, "found", core)
        self.on_found(core)
        return core


#: What a façade holds: a core, or a Discovering one until its first call.
AnyCore = QueueCore | PartitionedCore | Discovering
