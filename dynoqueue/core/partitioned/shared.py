"""PartitionedState: what every group of a partitioned queue's operations shares: the base
core and the partitions, routing a call to them, the queue's first-call check, and running
calls on several partitions together.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from ...errors import ConfigurationError
from ...model import validate
from ...model.message import Message
from ...model.partitions import partition_of_id, partition_tags
from ...model.policy import QueuePolicy
from ...model.settings import QueueSettings
from ..failures import guarded
from ..leases import id_receipt_pairs
from ..queue import QueueCore
from ..requests import QUORUM, Op
from ..together import together
from .quiet import Quiet

T = TypeVar("T")


def _shared(name: str) -> Any:
    """An attribute read from the base core and written to every core of the queue."""

    def get(self: PartitionedState) -> Any:
        return getattr(self.base, name)

    def put(self: PartitionedState, value: Any) -> None:
        for core in (self.base, *self.parts):
            setattr(core, name, value)

    return property(get, put)


class PartitionedState:
    """The state of one queue split into partitions (constructed as
    :class:`~dynoqueue.core.partitioned.PartitionedCore`: same arguments and errors); each
    group of operations (:mod:`~dynoqueue.core.partitioned.core`) is a subclass."""

    closed = _shared("closed")
    detached = _shared("detached")
    events = _shared("events")
    zones = _shared("zones")
    server_check = _shared("server_check")

    def __init__(self, name: str, settings: QueueSettings, *, quorum_cluster: bool,
                 replica_reads: bool, policy: QueuePolicy, stored: bool = False) -> None:
        make = QueueCore
        self.base = make(name, settings, quorum_cluster=quorum_cluster,
                         replica_reads=replica_reads, policy=policy)
        # Each partition stores its share of the queue-wide limits (QueuePolicy.share).
        self.parts = [make(name, settings, quorum_cluster=quorum_cluster,
                           replica_reads=replica_reads, policy=policy.share(k), tag=tag)
                      for k, tag in enumerate(partition_tags(name, policy.partitions))]
        if stored:
            for core in (self.base, *self.parts):
                core.policy, core.policy_checked = None, True
        self.name = name
        self.settings = settings
        self.keys = self.base.keys
        self.shards = self.base.shards
        self.local_shard = self.base.local_shard
        self.unack_timeout_ms = self.base.unack_timeout_ms
        #: The policy this process was configured with (None: whatever is stored).
        self.policy: QueuePolicy | None = None if stored else policy
        self.count = policy.partitions
        #: Every partition's shard channels, partition after partition.
        self.bell_channels = [c for part in self.parts for c in part.bell_channels]
        self._checked = stored
        self._turn = itertools.count()
        #: The last pop came back short: the next one asks every partition what is due first.
        self._sparse = False
        #: The partition whose message falls due first, as the last ``due.lua`` round told,
        #: and when (monotonic s): a claim from then on tries it first, without asking again.
        self._due_hint: tuple[QueueCore, float] | None = None
        #: The last round that found nothing due (a waiting pop may start from it), if fresh.
        self._quiet: Quiet | None = None
        #: The partitions whose last claim or due query could not reach their node (replaced,
        #: not changed in place: a round reads it once, before it notes what failed).
        self._unreachable: frozenset[QueueCore] = frozenset()

    # ----------------------------------------------------------------------------- routing

    def part_of(self, id: str, group: str | None = None) -> QueueCore:
        """The partition holding message ``id`` (of ordered group ``group``, if any)."""
        return self.parts[partition_of_id(id, group, self.count)]

    def _rotation(self) -> list[int]:
        """The partitions' indices in the order this call visits them: one further on each
        call."""
        start = next(self._turn) % self.count
        return [*range(start, self.count), *range(start)]

    def _checked_op(self, operation: str, op: Op[T]) -> Op[T]:
        """``op``, after the queue's own first-call check when it is not done yet."""
        if self._checked:
            return op
        return self._check_then(operation, op)

    def _check_then(self, operation: str, op: Op[T]) -> Op[T]:
        if not self._checked:
            yield from self._check_layout(operation)
        return (yield from op)

    def _check_layout(self, operation: str) -> Op[None]:
        """Store this process's policy (with its partition count) in the queue's one-partition
        policy key, or refuse a different one; then refuse to go on if messages wait in the
        one-partition layout (pushed by a process that did not know of the partitions)."""
        base = self.base
        base.check_attached()
        key = base.keys.policy
        if not base.server_check.done:
            yield from guarded(operation, key, base.server_check.run(key))
        yield from guarded(operation, key, base._check_policy())
        key = base.keys.message_hash
        stray = yield from guarded(operation, key, base.sender.command(QUORUM, "HLEN", key))
        if int(stray):
            raise ConfigurationError(
                f"queue {self.name!r} is made of {self.count} partitions, but {int(stray)} "
                f"messages are stored in its one-partition layout ({base.keys.message_hash}): "
                f"a process that was given no policy pushed before the partitioned policy was "
                f"stored. Drain them with a one-partition queue of another process first")
        self._checked = True

    def _one(self, operation: str, id: str, call: Callable[[QueueCore], Op[T]]) -> Op[T]:
        """``call`` on the partition holding message ``id``: its id's partition, where every
        message without a group lives. A message of an ordered group lives in its group's
        partition, which the id alone does not tell: when the id's partition answers "not
        here" (False, None, 0), the others are asked whether they hold the id (HEXISTS, one
        each) and ``call`` runs on the one that does."""
        validate.message_id(id)
        home = self.part_of(id)
        return self._checked_op(operation, self._found_or_probed(id, home, call))

    def _found_or_probed(self, id: str, home: QueueCore,
                         call: Callable[[QueueCore], Op[T]]) -> Op[T]:
        result = yield from call(home)
        if result:
            return result
        for part in self.parts:
            if part is not home and (yield from part.contains(id)):
                return (yield from call(part))
        return result

    def _split_pairs(self, operation: str, ids: Iterable[str | Message]
                     ) -> list[tuple[QueueCore, list[str]]]:
        """[id, receipt, ...] pairs of ``ids``, validated, by partition (in partition order):
        a popped Message of an ordered group goes to its group's partition, any other item to
        its id's (a grouped message given by id alone is not found)."""
        items = validate.listed(f"{operation} takes a list of ids, not a single id", ids,
                                single=(Message,))
        pairs = id_receipt_pairs(operation, items)
        shares: dict[int, list[str]] = {}
        for i, item in enumerate(items):
            group = item.group if isinstance(item, Message) else None
            shares.setdefault(partition_of_id(pairs[2 * i], group, self.count),
                              []).extend(pairs[2 * i:2 * i + 2])
        return [(self.parts[k], shares[k]) for k in sorted(shares)]

    @staticmethod
    def _sum(ops: list[Op[int]]) -> Op[int]:
        """The sum of ``ops``' results, run together (one round trip per step, not per op)."""
        return sum((yield from together(ops)))

    def _each(self, call: Callable[[QueueCore], Op[T]]) -> Op[list[T]]:
        """``call`` on every partition, run together; the replies in partition order."""
        return (yield from together([call(part) for part in self.parts]))

    @staticmethod
    def _first_of(parts: list[QueueCore], call: Callable[[QueueCore], Op[T | None]]
                  ) -> Op[T | None]:
        for part in parts:
            found = yield from call(part)
            if found is not None:
                return found
        return None
