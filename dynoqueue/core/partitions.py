"""PartitionedCore: the operations of a queue split into partitions (``QueuePolicy.partitions``).

Each partition is a :class:`~dynoqueue.core.queue.QueueCore` over the whole one-partition
layout under its own hash tag (:mod:`dynoqueue.model.partitions`), so it is one Redis Cluster
slot and every script stays single-slot. This class only routes:

* a call about one message (ack, nack, get, state, remove, postpone, ...) goes to the partition
  that holds it, ``crc32(id) % n`` (an ordered group's: ``crc32(group) % n``): one script, as on
  a queue of one partition;
* a call about many ids (push, ack_many, ...) validates them all first, then calls each
  partition concerned once with its share;
* a call about the whole queue (pop, size, peek, clear, process_unacks, ...) fans out: pops
  fill one batch from the partitions in turn, starting one further on each call so none
  starves, and stop as soon as the batch is full.

Beside the partitions, the queue's one-partition keys hold its stored policy (with its
``parts``: how processes that were given no policy find the partitions) and nothing else.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from ..errors import ConfigurationError, InvalidArgumentError
from ..model import validate
from ..model.message import Message
from ..model.partitions import partition_of, partition_of_message, partition_tags
from ..model.policy import QueuePolicy
from ..model.schedules import Schedule
from ..model.settings import QueueSettings
from ..model.states import DeadLetter, MessageInfo, MessageState
from . import schedules
from .consume import WaitingPop
from .failures import guarded
from .leases import id_receipt_pairs
from .queue import QueueCore
from .replies import Claim
from .requests import QUORUM, Cancelled, Command, Op
from .together import together

T = TypeVar("T")


def _shared(name: str) -> Any:
    """An attribute read from the base core and written to every core of the queue."""

    def get(self: PartitionedCore) -> Any:
        return getattr(self.base, name)

    def put(self: PartitionedCore, value: Any) -> None:
        for core in (self.base, *self.parts):
            setattr(core, name, value)

    return property(get, put)


class Spread:
    """What one pop over the partitions holds: a claim per partition, all sharing one ``held``
    (so each stops once the pop's count is reached), and which partition leased each id."""

    __slots__ = ("claims", "count", "held", "lease_ms", "order", "owner")

    def __init__(self, claims: list[tuple[QueueCore, Claim]], count: int, lease_ms: int,
                 order: list[int]) -> None:
        self.claims = claims
        self.count = count
        self.lease_ms = lease_ms
        self.order = order  # the bell channels this pop listens on
        self.held: dict[str, tuple[Message, int]] = {}
        for _, claim in claims:
            claim.held = self.held
        self.owner: dict[str, QueueCore] = {}

    def messages(self) -> list[Message]:
        return [m for m, _ in self.held.values()]


class PartitionedCore(WaitingPop):
    """The operations of one queue split into ``policy.partitions`` partitions; same methods,
    arguments and errors as :class:`~dynoqueue.core.queue.QueueCore`.

    Args:
        name, settings, quorum_cluster, replica_reads: as for QueueCore.
        policy: the queue's policy, ``partitions`` > 1.
        stored: the policy was read from Redis (a process given none): apply what is stored,
            check nothing.
    """

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

    def __repr__(self) -> str:
        return (f"DynoQueue({self.name!r}, shards={self.shards}, local={self.local_shard!r}, "
                f"partitions={self.count})")

    # ----------------------------------------------------------------------------- routing

    def part_of(self, id: str, group: str | None = None) -> QueueCore:
        """The partition holding message ``id`` (of ordered group ``group``, if any)."""
        return self.parts[partition_of(id if group is None else group, self.count)]

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
            key = pairs[2 * i] if group is None else group
            shares.setdefault(partition_of(key, self.count), []).extend(pairs[2 * i:2 * i + 2])
        return [(self.parts[k], shares[k]) for k in sorted(shares)]

    @staticmethod
    def _sum(ops: list[Op[int]]) -> Op[int]:
        """The sum of ``ops``' results, run together (one round trip per step, not per op)."""
        return sum((yield from together(ops)))

    def _each(self, call: Callable[[QueueCore], Op[T]]) -> Op[list[T]]:
        """``call`` on every partition, run together; the replies in partition order."""
        return (yield from together([call(part) for part in self.parts]))

    # ----------------------------------------------------------------------------- produce

    def push(self, messages: Iterable[Message], if_exists: str = "replace") -> Op[list[str]]:
        batch, _ = self.push_call(messages, if_exists)
        return self.push_validated(batch, if_exists)

    def push_call(self, messages: Iterable[Message],
                  if_exists: str = "replace") -> tuple[list[Message], Command | None]:
        """The validated batch, and the one command of its push when every message of it goes
        to one partition (a one-message push: the producer's usual call) and that partition's
        push is one command (see QueueCore.push_call); else None."""
        batch = self.base.prepare_push(messages, if_exists)
        if not self._checked or not batch:
            return batch, None
        first = self._partition_of_message(batch[0])
        if any(self._partition_of_message(m) != first for m in batch[1:]):
            return batch, None
        return batch, self.parts[first].push_command(batch, if_exists)

    def pushed(self, batch: list[Message], reply: Any) -> list[str]:
        """The result of :meth:`push_call`'s command."""
        return self.parts[self._partition_of_message(batch[0])].pushed(batch, reply)

    def _partition_of_message(self, message: Message) -> int:
        return partition_of_message(message, self.count)

    def push_validated(self, batch: list[Message], if_exists: str) -> Op[list[str]]:
        if not batch:
            return self._nothing()
        self.base.check_open()
        # Shards are chosen here, in input order and before anything is written, so the
        # sharding strategy sees the batch as on a queue of one partition (round robin: m0
        # in a, m1 in b, ...) and an unknown shard it returns writes nothing.
        place, count = self.base.shard_index, self.count
        lists: list[tuple[list[Message], list[int]]] = [([], []) for _ in range(count)]
        for m in batch:
            messages, shard_indices = lists[partition_of_message(m, count)]
            messages.append(m)
            shard_indices.append(place(m))
        shares = {k: share for k, share in enumerate(lists) if share[0]}
        return self._checked_op("push", self._push_shares(batch, if_exists, shares))

    @staticmethod
    def _nothing() -> Op[list[str]]:
        return []
        yield  # a generator: an operation that sends nothing

    def _push_shares(self, batch: list[Message], if_exists: str,
                     shares: dict[int, tuple[list[Message], list[int]]]) -> Op[list[str]]:
        # Every share in one round trip. Each partition's share has one "now" (its server's
        # clock unless one is injected); shares of different partitions may differ by the
        # time between them, which no order observes: due order holds within a partition.
        replies = yield from together([
            self.parts[k].push_validated(messages, if_exists, shard_indices)
            for k, (messages, shard_indices) in sorted(shares.items())])
        if sum(len(ids) for ids in replies) == len(batch):  # all pushed: the usual reply
            return [m.id for m in batch]
        pushed: Counter[str] = Counter()
        for ids in replies:
            pushed.update(ids)
        out: list[str] = []
        for m in batch:  # in input order, each id as often as it was pushed
            if pushed[m.id]:
                pushed[m.id] -= 1
                out.append(m.id)
        return out

    def ensure(self, message: Message) -> Op[bool]:
        (message,) = self.base.validate_batch([message])
        return self._checked_op("ensure", self.part_of(message.id, message.group).ensure(message))

    # ----------------------------------------------------------------------------- consume

    def pop(self, operation: str, all_shards: bool, count: int, wait_ms: int,
            lease_ms: int | None = None, min_count: int | None = None) -> Op[list[Message]]:
        """:meth:`QueueCore.pop` over the partitions: one batch filled from each partition's
        shards in turn (the local shard, then as QueueCore.pop), starting one partition further
        on each call; a waiting pop wakes on a ring of any of them."""
        lease, enough, order = self.base.pop_plan(all_shards, count, wait_ms, lease_ms,
                                                  min_count)
        if count == 0:
            return []
        rotation = self._rotation()
        width = len(self.shards)
        spread = Spread([(self.parts[k], Claim(order, count, lease)) for k in rotation], count,
                        lease, [k * width + i for k in rotation for i in order])
        if wait_ms == 0:
            got = yield from self._checked_op(operation, self._claim_now(operation, spread))
        else:
            got = yield from self._checked_op(operation, self._waiting_pop(
                operation, spread, min(enough, count), wait_ms))
        # A claimed tick queues its schedule's next one (core.schedules).
        return (yield from schedules.chain_ticks(self.base, self.part_of, got))

    def _claim_now(self, operation: str, spread: Spread) -> Op[list[Message]]:
        yield from self._guarded_claim(operation, spread)
        return spread.messages()

    def _guarded_claim(self, operation: str, claim: Any) -> Op[int | None]:
        """Claim from each partition in the pop's order until it holds its count; on
        cancellation put back everything leased (see QueueCore._guarded_claim). Returns the ms
        until the next waiting message of the partitions visited is due (None if none)."""
        spread: Spread = claim
        next_due: int | None = None
        claims, sparse = self._hinted(spread.claims)
        try:
            for at, (part, part_claim) in enumerate(claims):
                if len(spread.held) >= spread.count:
                    break
                if at == int(not sparse) and len(claims) > 2:
                    # The queue is sparse here (the first partition fell short, or the last
                    # pop did): ask the partitions left at once (one round trip per node,
                    # read-only) and claim only where something is due, instead of a claim
                    # per partition in turn.
                    claims, due = yield from self._due_among(operation, claims[at:])
                    next_due = _earliest(next_due, due)
                    for part, part_claim in claims:
                        if len(spread.held) >= spread.count:
                            break
                        due = yield from self._claim_part(operation, spread, part, part_claim)
                        next_due = _earliest(next_due, due)
                    break
                due = yield from self._claim_part(operation, spread, part, part_claim)
                next_due = _earliest(next_due, due)
            self._sparse = len(spread.held) < spread.count
            return next_due
        except Cancelled:
            yield from self.release_claim(spread)
            raise

    @staticmethod
    def _claim_part(operation: str, spread: Spread, part: QueueCore,
                    part_claim: Claim) -> Op[int | None]:
        """One partition's claim of a pop; records which partition leased each id."""
        before = set(spread.held)
        try:
            due: int | None = yield from part.guard(
                operation, part.keys.queue_shard(part.local_shard), part.claim_once(part_claim))
            return due
        finally:
            for id in spread.held.keys() - before:
                spread.owner[id] = part

    def _due_among(self, operation: str, claims: list[tuple[QueueCore, Claim]]
                   ) -> Op[tuple[list[tuple[QueueCore, Claim]], int | None]]:
        """The claims whose partition has something due now (due.lua, every partition at
        once), and the ms until the first of the others' is due (None: nothing waits)."""
        answers = yield from guarded(operation, self.base.keys.message_hash, together(
            [part.due_in(part_claim.order) for part, part_claim in claims]))
        later = [(ms, at) for at, ms in enumerate(answers) if ms > 0]
        if later:
            ms, at = min(later)
            self._due_hint = (claims[at][0], time.monotonic() + ms / 1000)
        return ([c for c, ms in zip(claims, answers, strict=True) if ms == 0],
                min(later)[0] if later else None)

    def _hinted(self, claims: list[tuple[QueueCore, Claim]]
                ) -> tuple[list[tuple[QueueCore, Claim]], bool]:
        """The claims in the order to try them, and whether to ask every partition first (the
        queue is sparse): once the partition the last ``due.lua`` round named has its message
        due, it is claimed first, directly (one round trip where asking would take two: a
        waiting pop woken by that due time gets it at once)."""
        hint = self._due_hint
        if hint is None or time.monotonic() < hint[1]:
            return claims, self._sparse
        self._due_hint = None
        first = [c for c in claims if c[0] is hint[0]]
        if not first:
            return claims, self._sparse
        return first + [c for c in claims if c[0] is not hint[0]], False

    def release_claim(self, claim: Any) -> Op[None]:
        """Put back what a cancelled pop leased, each message in its partition."""
        spread: Spread = claim
        for part, _ in spread.claims:
            mine = Claim([], 0, spread.lease_ms)
            mine.held = {id: held for id, held in spread.held.items()
                         if spread.owner.get(id) is part}
            if mine.held:
                yield from part.release_claim(mine)
        spread.held.clear()

    def claim_id(self, operation: str, id: str, all_shards: bool) -> Op[Message | None]:
        return self._one(operation, id, lambda part: part.claim_id(operation, id, all_shards))

    def claim_match(self, pattern: str, local_only: bool) -> Op[Message | None]:
        validate.pattern(pattern)
        return self._checked_op("pop_msg_with_predicate",
                                self._first_of([self.parts[k] for k in self._rotation()],
                                               lambda p: p.claim_match(pattern, local_only)))

    @staticmethod
    def _first_of(parts: list[QueueCore], call: Callable[[QueueCore], Op[T | None]]
                  ) -> Op[T | None]:
        for part in parts:
            found = yield from call(part)
            if found is not None:
                return found
        return None

    # ----------------------------------------------------------------------------- leases

    def ack(self, id: str, receipt: str | None = None) -> Op[bool]:
        return self._one("ack", id, lambda part: part.ack(id, receipt))

    def ack_many(self, ids: Iterable[str | Message]) -> Op[int]:
        shares = self._split_pairs("ack_many", ids)
        return self._checked_op("ack", self._sum([p.ack_pairs(s) for p, s in shares]))

    def release(self, ids: Iterable[str | Message]) -> Op[int]:
        shares = self._split_pairs("release", ids)
        return self._checked_op("release", self._sum([p.release_pairs(s) for p, s in shares]))

    def nack(self, id: str, delay_ms: int = 0, error: str | None = None,
             receipt: str | None = None) -> Op[bool]:
        return self._one("nack", id, lambda part: part.nack(id, delay_ms, error, receipt))

    def nack_many(self, ids: Iterable[str | Message], delay_ms: int = 0,
                  error: str | None = None) -> Op[int]:
        shares = self._split_pairs("nack_many", ids)
        validate.ms("delay_ms", delay_ms)
        if error is not None:
            validate.text("error", error)
        return self._checked_op("nack", self._sum(
            [p.nack_pairs(s, delay_ms, error) for p, s in shares]))

    def set_lease(self, operation: str, id: str, timeout_ms: int, *,
                  only_if_shorter: bool, receipt: str | None = None) -> Op[bool]:
        return self._one(operation, id, lambda part: part.set_lease(
            operation, id, timeout_ms, only_if_shorter=only_if_shorter, receipt=receipt))

    def set_lease_many(self, ids: Iterable[str | Message], timeout_ms: int) -> Op[int]:
        shares = self._split_pairs("set_unack_timeout_many", ids)
        validate.ms("timeout_ms", timeout_ms)
        return self._checked_op("set_unack_timeout_many", self._sum(
            [p.set_lease_pairs(s, timeout_ms) for p, s in shares]))

    def dead_letter(self, id: str, reason: str, error: str | None = None,
                    receipt: str | None = None) -> Op[bool]:
        return self._one("dead_letter", id,
                         lambda part: part.dead_letter(id, reason, error, receipt))

    def postpone(self, id: str, delay_ms: int, priority: int | None) -> Op[bool]:
        return self._one("postpone", id, lambda part: part.postpone(id, delay_ms, priority))

    def set_timeout(self, id: str, timeout_ms: int) -> Op[bool]:
        return self._one("set_timeout", id, lambda part: part.set_timeout(id, timeout_ms))

    def remove(self, id: str) -> Op[bool]:
        return self._one("remove", id, lambda part: part.remove(id))

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

    def contains(self, id: str) -> Op[bool]:
        return self._one("contains", id, lambda part: part.contains(id))

    def get(self, operation: str, id: str, local: bool) -> Op[Message | None]:
        return self._one(operation, id, lambda part: part.get(operation, id, local))

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

    def state(self, id: str) -> Op[MessageState | None]:
        return self._one("state", id, lambda part: part.state(id))

    def info(self, id: str) -> Op[MessageInfo | None]:
        return self._one("info", id, lambda part: part.info(id))

    def group_info(self, group: str) -> Op[dict[str, Any]]:
        validate.text("group", group, empty=False)
        return self._checked_op("group_info", self.part_of("", group).group_info(group))

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


def _earliest(a: int | None, b: int | None) -> int | None:
    """The sooner of two "ms until due" (None: nothing due)."""
    if a is None:
        return b
    return a if b is None else min(a, b)
