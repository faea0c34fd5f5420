"""Which core serves a queue: one partition (:class:`~dynoqueue.core.queue.QueueCore`), several
(:class:`~dynoqueue.core.partitions.PartitionedCore`), or, for a process given no policy, the one
the queue's stored policy names, found at its first call (:class:`Discovering`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ..model.message import Message
from ..model.settings import QueueSettings
from ..model.states import QueuePolicy
from .failures import guarded
from .partitions import PartitionedCore
from .queue import QueueCore
from .requests import QUORUM, Command, Op, Sleep

#: What serves a queue once its layout is known.
Core = QueueCore | PartitionedCore
#: How often a first call waiting for another's policy lookup checks whether it is done, s.
LOOKUP_POLL_S = 0.002
#: What the factory sets on a core after making it; a core found later gets the same.
_WIRED = ("closed", "detached", "events", "zones", "server_check")
#: The operations a façade or the factory runs (each returns an Op).
_OPERATIONS = frozenset({
    "push", "push_validated", "ensure", "pop", "claim_id", "claim_match", "ack", "ack_many",
    "release", "nack", "nack_many", "set_lease", "set_lease_many", "dead_letter", "postpone",
    "set_timeout", "remove", "peek", "contains", "get", "get_all_messages", "find_match",
    "contains_match", "size", "shard_sizes", "find_stale_messages", "state", "info",
    "group_info", "dead_letters", "dead_size", "process_unacks", "redrive", "purge_dead",
    "clear", "stored_policy", "set_policy"})


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
    """The core of a queue whose process was given no policy, until its first call reads the
    stored one: a queue stored with partitions gets a PartitionedCore, any other the one-
    partition core. Then ``on_found(core)`` is told (the façade and the factory hold that core
    from then on, so later calls pay nothing) and the call runs on it.

    Until then attributes are the one-partition core's, and what is set is set on it (and
    copied to a PartitionedCore made later). A queue stored unpartitioned stays so for this
    process, even if another process later stores a partitioned policy for the name: give
    every process the policy (docs/deployments.md, "Scaling one queue").
    """

    _plain: QueueCore
    _partitioned: Callable[[QueuePolicy], PartitionedCore]
    #: The core the stored policy named (None until the first call has read it).
    found: Core | None
    looking: bool
    on_found: Callable[[Core], None]

    def __init__(self, plain: QueueCore,
                 partitioned: Callable[[QueuePolicy], PartitionedCore]) -> None:
        object.__setattr__(self, "_plain", plain)
        object.__setattr__(self, "_partitioned", partitioned)
        object.__setattr__(self, "found", None)
        #: A first call is reading the stored policy (the others wait for it).
        object.__setattr__(self, "looking", False)
        #: Told the core once the layout is known.
        object.__setattr__(self, "on_found", lambda core: None)

    def __getattr__(self, name: str) -> Any:
        core = self.found or self._plain
        if name in _OPERATIONS and self.found is None:
            return lambda *args, **kwargs: self._after_lookup(name, args, kwargs)
        return getattr(core, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "on_found":
            object.__setattr__(self, name, value)
            return
        setattr(self._plain, name, value)
        if self.found is not None and self.found is not self._plain:
            setattr(self.found, name, value)

    def __repr__(self) -> str:
        return repr(self.found or self._plain)

    def push_call(self, messages: Iterable[Message],
                  if_exists: str = "replace") -> tuple[list[Message], Command | None]:
        if self.found is not None:
            return self.found.push_call(messages, if_exists)
        batch = self._plain._push_batch(messages, if_exists)
        self._plain._check_open()
        return batch, None

    def _after_lookup(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Op[Any]:
        core = yield from self.lookup(name)
        return (yield from getattr(core, name)(*args, **kwargs))

    def lookup(self, operation: str) -> Op[Core]:
        """Read the stored policy; the core it names (made once). Concurrent first calls
        (200 waiting pops started together) wait for the one lookup under way instead of each
        sending its own: a burst of them on a fresh asyncio Cluster client broke its
        connections."""
        plain: QueueCore = self._plain
        plain._check_attached()
        key = plain.keys.policy
        core: Core = yield from guarded(operation, key, self._look_up(key))
        return core

    def _look_up(self, key: str) -> Op[Core]:
        while self.looking and self.found is None:
            yield Sleep(LOOKUP_POLL_S)
        if self.found is not None:
            return self.found
        object.__setattr__(self, "looking", True)
        try:
            raw = yield from self._plain.sender.command(QUORUM, "GET", key)
        finally:
            object.__setattr__(self, "looking", False)
        if self.found is not None:  # a concurrent first call found it meanwhile
            return self.found
        plain = self._plain
        stored = None if raw is None else QueuePolicy.from_json(raw)
        core: Core = plain
        if stored is not None and stored.partitions > 1:
            core = self._partitioned(stored)
            for attr in _WIRED:
                setattr(core, attr, getattr(plain, attr))
        object.__setattr__(self, "found", core)
        self.on_found(core)
        return core


#: What a façade holds: a core, or a Discovering one until its first call.
AnyCore = QueueCore | PartitionedCore | Discovering
