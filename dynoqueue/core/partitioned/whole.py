"""The whole-queue calls of a partitioned queue, fanned out to every partition and their replies
merged: peek, sizes, scans, dead letters, the unack pass, redrive, clear, pause, schedules and
the stored policy."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from ...errors import ConfigurationError, InvalidArgumentError
from ...model import validate
from ...model.message import Message
from ...model.partitions import partition_of
from ...model.policy import QueuePolicy
from ...model.schedules import Schedule
from ...model.states import DeadLetter
from .. import schedules
from ..failures import guarded
from ..queue import QueueCore
from ..requests import QUORUM, Op
from .shared import PartitionedState

T = TypeVar("T")


class WholeQueue(PartitionedState):
    """peek, get_all_messages, find_match, sizes, stale messages, dead letters, process_unacks,
    redrive, purge_dead, clear, delete_policy, pause, resume, schedules, the stored policy."""

    # ----------------------------------------------------------------------------- inspection

    def peek(self, operation: str, all_shards: bool, count: int) -> Op[list[Message]]:
        """Up to ``count`` messages of every partition (each in its own due order), taken in
        turn from each partition's list: due order holds within a partition only."""
        validate.count("count", count)
        return self._checked_op(operation, self._peek(operation, all_shards, count))

    def _peek(self, operation: str, all_shards: bool, count: int) -> Op[list[Message]]:
        lists = yield from self._each(lambda p: p.peek(operation, all_shards, count))
        merged = [m for row in itertools.zip_longest(*lists) for m in row if m is not None]
        return merged[:count]

    def get_all_messages(self) -> Op[list[Message]]:
        return self._checked_op("get_all_messages", self._concat(lambda p: p.get_all_messages()))

    def _concat(self, call: Callable[[QueueCore], Op[list[T]]]) -> Op[list[T]]:
        lists = yield from self._each(call)
        return [item for row in lists for item in row]

    def find_match(self, pattern: str, local_only: bool) -> Op[str | None]:
        validate.pattern(pattern)
        return self._checked_op("get_msg_with_predicate", self._first_of(
            self.parts, lambda p: p.find_match(pattern, local_only)))

    def contains_match(self, pattern: str, local_only: bool) -> Op[bool]:
        found = yield from self.find_match(pattern, local_only)
        return found is not None

    def size(self) -> Op[int]:
        return sum(s["size"] for s in (yield from self.shard_sizes()).values())

    def shard_sizes(self) -> Op[dict[str, dict[str, int]]]:
        return self._checked_op("shard_sizes", self._shard_sizes())

    def _shard_sizes(self) -> Op[dict[str, dict[str, int]]]:
        per_part = yield from self.partition_sizes()
        total: dict[str, dict[str, int]] = {}
        for sizes in per_part:
            for shard, counts in sizes.items():
                row = total.setdefault(shard, dict.fromkeys(counts, 0))
                for name, n in counts.items():
                    row[name] += n
        return total

    def partition_sizes(self) -> Op[list[dict[str, dict[str, int]]]]:
        """:meth:`shard_sizes` of each partition, in partition order."""
        return (yield from self._each(lambda p: p.shard_sizes()))

    def find_stale_messages(self) -> Op[list[Message]]:
        return self._checked_op("find_stale_messages",
                                self._concat(lambda p: p.find_stale_messages()))

    def dead_letters(self, count: int) -> Op[list[DeadLetter]]:
        """Up to ``count`` dead letters of all partitions, the oldest first (each partition's
        list is in the order it died in; they are merged by death time)."""
        validate.count("count", count)
        return self._checked_op("dead_letters", self._dead_letters(count))

    def _dead_letters(self, count: int) -> Op[list[DeadLetter]]:
        if count == 0:
            return []
        lists = yield from self._each(lambda p: p.dead_letters(count))
        return list(heapq.merge(*lists, key=lambda d: d.died_at_ms))[:count]

    def dead_size(self) -> Op[int]:
        return self._checked_op("dead_size", self._sum([p.dead_size() for p in self.parts]))

    # ----------------------------------------------------------------------------- upkeep

    def process_unacks(self) -> Op[int]:
        return self._checked_op("process_unacks", self._sum(
            [p.process_unacks() for p in self.parts]))

    def redrive(self, ids: Iterable[str] | None, delay_ms: int) -> Op[int]:
        validate.ms("delay_ms", delay_ms)
        if ids is None:
            return self._checked_op("redrive", self._sum(
                [p.redrive(None, delay_ms) for p in self.parts]))
        chosen = [validate.message_id(i) for i in validate.listed(
            "redrive takes a list of ids (or None for all)", ids, single=(Message,))]
        shares: dict[int, list[str]] = {}
        for id in chosen:
            shares.setdefault(partition_of(id, self.count), []).append(id)
        return self._checked_op("redrive", self._sum(
            [self.parts[k].redrive(shares[k], delay_ms) for k in sorted(shares)]))

    def purge_dead(self) -> Op[int]:
        return self._checked_op("purge_dead", self._sum([p.purge_dead() for p in self.parts]))

    def clear(self) -> Op[None]:
        """Clear every partition, then the one-partition keys (the registry entry); the
        stored policies stay (see :meth:`delete_policy`)."""
        self.base.check_open()
        return self._clear()

    def _clear(self) -> Op[None]:
        for part in self.parts:
            yield from part.clear()
        yield from self.base.clear()

    def delete_policy(self) -> Op[bool]:
        """Delete the stored policy of the queue and of every partition, refused while any
        partition holds a message or dead letter (the stored policy is how processes given
        none find the partitions)."""
        self.base.check_attached()
        return self._delete_policy()

    def _delete_policy(self) -> Op[bool]:
        for k, part in enumerate(self.parts):
            keys = part.keys
            held = yield from guarded("delete_policy", keys.policy, part.sender.command(
                QUORUM, "EXISTS", keys.message_hash, keys.dead))
            if int(held):
                raise ConfigurationError(
                    f"queue {self.name!r} has {self.count} partitions and partition {k} holds "
                    "messages; clear or drain the queue before deleting its policy (it is how "
                    "processes given no policy find the partitions)")
        for part in self.parts:
            yield from part.delete_policy()
        deleted = yield from self.base.delete_policy()
        self._checked = self.policy is None
        return deleted

    # ----------------------------------------------------------------------------- pause
    # Each partition has its own flag (its claims read it in their slot).

    def pause(self) -> Op[bool]:
        """Pause every partition. Returns True if any was running."""
        self.base.check_open()
        return self._checked_op("pause", self._any(self._each(lambda part: part.pause())))

    def resume(self) -> Op[bool]:
        """Resume every partition (ringing its doorbells). Returns True if any was paused."""
        self.base.check_open()
        return self._checked_op("resume", self._any(self._each(lambda part: part.resume())))

    def is_paused(self) -> Op[bool]:
        """Whether any partition is paused (after a pause, all are)."""
        self.base.check_attached()
        return self._checked_op("is_paused",
                                self._any(self._each(lambda part: part.is_paused())))

    @staticmethod
    def _any(op: Op[list[bool]]) -> Op[bool]:
        return any((yield from op))

    # ----------------------------------------------------------------------------- schedules
    # The records live in the base's keys; each tick goes to its message's partition.

    def schedule(self, schedule_id: str, **definition: Any) -> Op[Schedule]:
        return self._checked_op("schedule", schedules.upsert(
            self.base, self.part_of, schedule_id, **definition))

    def schedules(self) -> Op[list[Schedule]]:
        return self._checked_op("schedules", schedules.listed(self.base))

    def unschedule(self, schedule_id: str) -> Op[bool]:
        return self._checked_op("unschedule",
                                schedules.remove(self.base, self.part_of, schedule_id))

    def run_schedules(self) -> Op[int]:
        return self._checked_op("run_schedules", schedules.run_pass(self.base, self.part_of))

    def stored_policy(self) -> Op[QueuePolicy | None]:
        return self.base.stored_policy()

    def set_policy(self, policy: QueuePolicy) -> Op[QueuePolicy | None]:
        if not isinstance(policy, QueuePolicy):
            raise InvalidArgumentError(f"policy must be a QueuePolicy, got {policy!r:.80}")
        if policy.partitions != self.count:
            raise ConfigurationError(
                f"queue {self.name!r} has {self.count} partitions; partitions cannot change on "
                f"a live queue (drain it into a new queue made with "
                f"partitions={policy.partitions})")
        return self._set_policy(policy)

    def _set_policy(self, policy: QueuePolicy) -> Op[QueuePolicy | None]:
        previous = yield from self.base.set_policy(policy)
        for k, part in enumerate(self.parts):
            yield from part.set_policy(policy.share(k))
        self.policy, self._checked = policy, True
        return previous
