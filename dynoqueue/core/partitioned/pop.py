"""The fanned-out pop: one batch filled from the partitions in turn (the hinted partition first,
else due.lua over the partitions when the queue is sparse), the waiting pop over all of their
doorbells; claim by id or pattern.

A partition whose node cannot be reached (down, or its slots failing over: :func:`unreachable`)
is skipped by a pop, which serves the others; only a pop that gets nothing raises that error (a
waiting pop: once its wait ends), so a consumer learns that part of the queue is unreachable.
"""

from __future__ import annotations

import time
from typing import Any, TypeVar

from redis.exceptions import ClusterError, SlotNotCoveredError
from redis.exceptions import ConnectionError as RedisConnectionError

from ...errors import ConnectionFailedError, RedisOperationError
from ...model import validate
from ...model.message import Message
from .. import schedules
from ..consume import WaitingPop
from ..failures import guarded
from ..queue import QueueCore
from ..replies import Claim
from ..requests import BellState, Cancelled, Op, Ticket
from ..sender import SLOT_MOVED_ERRORS
from ..together import together
from .quiet import Quiet
from .shared import PartitionedState

T = TypeVar("T")

#: What a Cluster raises while a node is down or its slots change hands (the cause of a
#: RedisOperationError; a refused connection is a ConnectionFailedError).
_NODE_DOWN = (RedisConnectionError, ClusterError, SlotNotCoveredError, *SLOT_MOVED_ERRORS)
#: How soon a waiting pop claims again while a partition is unreachable, ms: a failover takes
#: seconds, but the pop should have its messages as soon as the replica serves them.
RETRY_UNREACHABLE_MS = 50


class Spread:
    """What one pop over the partitions holds: a claim per partition, all sharing one ``held``
    (so each stops once the pop's count is reached), and which partition leased each id."""

    __slots__ = ("claims", "count", "failed", "held", "lease_ms", "order", "owner", "waiting")

    def __init__(self, claims: list[tuple[QueueCore, Claim]], count: int, lease_ms: int,
                 order: list[int], waiting: bool) -> None:
        self.claims = claims
        self.count = count
        self.lease_ms = lease_ms
        self.order = order  # the bell channels this pop listens on
        self.waiting = waiting  # a waiting pop: it may start from the last round's answer
        self.held: dict[str, tuple[Message, int]] = {}
        for _, claim in claims:
            claim.held = self.held
        self.owner: dict[str, QueueCore] = {}
        #: The first error of a partition the last round could not reach (None: it reached all).
        self.failed: RedisOperationError | None = None

    def skip(self, error: RedisOperationError) -> None:
        """Note that a partition of this round is unreachable (the round goes on without it)."""
        if self.failed is None:
            self.failed = error

    def messages(self) -> list[Message]:
        return [m for m, _ in self.held.values()]


class SpreadPop(PartitionedState, WaitingPop):
    """pop (its claims spread over the partitions), release_claim, claim_id, claim_match."""

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
                        lease, [k * width + i for k in rotation for i in order], wait_ms > 0)
        if wait_ms == 0:
            got = yield from self._checked_op(operation, self._claim_now(operation, spread))
        else:
            got = yield from self._checked_op(operation, self._waiting_pop(
                operation, spread, min(enough, count), wait_ms))
        if not got and spread.failed is not None and not self.closed:
            # Nothing from the partitions reached, some not reached: not an empty queue.
            raise _as_connection_failed(spread.failed)
        # A claimed tick queues its schedule's next one (core.schedules).
        return (yield from schedules.chain_ticks(self.base, self.part_of, got))

    def _claim_now(self, operation: str, spread: Spread) -> Op[list[Message]]:
        # The ring count before the claims (no subscription is made for it), so that a round
        # that finds nothing due can tell the waiting pop that follows (see Quiet).
        bell: BellState = yield Ticket(self, [self.bell_channels[i] for i in spread.order],
                                       subscribe=False)
        yield from self._guarded_claim(operation, spread, bell)
        return spread.messages()

    def _guarded_claim(self, operation: str, claim: Any,
                       bell: BellState | None = None) -> Op[int | None]:
        """Claim from each partition in the pop's order until it holds its count; on
        cancellation put back everything leased (see QueueCore._guarded_claim). Returns the ms
        until the next waiting message of the partitions visited is due (None if none).

        A waiting pop whose ticket shows no ring since the last round of this queue that found
        nothing due, taken under :data:`QUIET_REUSE_S` ago, starts from that round's answer
        instead of asking every partition again (a consumer's ``pop(n) or pop(1, wait)``)."""
        spread: Spread = claim
        spread.failed = None
        ticket = bell.ticket if bell is not None and bell.listening else None
        channels = tuple(sorted(spread.order))
        if spread.waiting and ticket is not None and not spread.held:
            quiet = self._quiet
            if quiet is not None and quiet.holds(ticket, channels):
                left = quiet.due_in_ms()
                if left is None or left > 0:
                    return left
        self._quiet = None
        began = time.monotonic()
        next_due: int | None = None
        claims, sparse, hinted = self._hinted(spread.claims)
        try:
            for at, (part, part_claim) in enumerate(claims):
                if len(spread.held) >= spread.count:
                    break
                # (Not once a partition failed in this pop: its node's other partitions, not
                # known to be unreachable yet, could fail the whole round; see _claim_due.)
                if at == int(not sparse) and len(claims) > 2 and spread.failed is None:
                    # The queue is sparse here (the first partition fell short, or the last
                    # pop did): ask the partitions left at once (one round trip per node,
                    # read-only) and claim only where something is due, instead of a claim
                    # per partition in turn.
                    due = yield from self._claim_due(operation, spread, claims[at:])
                    next_due = _earliest(next_due, due)
                    break
                due = yield from self._claim_part(operation, spread, part, part_claim)
                next_due = _earliest(next_due, due)
            short = len(spread.held) < spread.count
            if short or not hinted:  # a hinted claim that filled the pop says nothing of the rest
                self._sparse = short
            if spread.failed is not None:
                # No Quiet: the round did not hear from every partition. A waiting pop claims
                # again soon (its loop), raising only if its wait ends with nothing.
                return _earliest(next_due, RETRY_UNREACHABLE_MS)
            if ticket is not None and not spread.held:  # all partitions visited, none due
                self._quiet = Quiet(ticket, channels, began, next_due)
            return next_due
        except Cancelled:
            yield from self.release_claim(spread)
            raise

    def _claim_due(self, operation: str, spread: Spread,
                   claims: list[tuple[QueueCore, Claim]]) -> Op[int | None]:
        """Claim where due.lua says something is due now, asking ``claims``' partitions at
        once; the ms until the next due message (None: none). Partitions found unreachable
        lately are not asked, only claimed after the others: a round that reaches an
        unreachable node may fail as a whole (the asyncio driver's Cluster pipeline does,
        after seconds of retries), which costs every partition's answer."""
        lately = self._unreachable
        due_now, next_due = yield from self._due_among(
            operation, spread, [c for c in claims if c[0] not in lately])
        for part, part_claim in [*due_now, *(c for c in claims if c[0] in lately)]:
            if len(spread.held) >= spread.count:
                break
            due = yield from self._claim_part(operation, spread, part, part_claim)
            next_due = _earliest(next_due, due)
        return next_due

    def _claim_part(self, operation: str, spread: Spread, part: QueueCore,
                    part_claim: Claim) -> Op[int | None]:
        """One partition's claim of a pop; records which partition leased each id. An
        unreachable partition is skipped (what it leased before failing is kept)."""
        before = set(spread.held)
        try:
            due: int | None = yield from part.guard(
                operation, part.keys.queue_shard(part.local_shard), part.claim_once(part_claim))
            self._note(spread, part, None)
            return due
        except RedisOperationError as error:
            if not unreachable(error):
                raise
            self._note(spread, part, error)
            return None
        finally:
            for id in spread.held.keys() - before:
                spread.owner[id] = part

    def _due_among(self, operation: str, spread: Spread, claims: list[tuple[QueueCore, Claim]]
                   ) -> Op[tuple[list[tuple[QueueCore, Claim]], int | None]]:
        """The claims whose partition has something due now (due.lua, every partition at
        once), and the ms until the first of the others' is due (None: nothing waits).
        Unreachable partitions are left out (noted in ``spread``)."""
        key = self.base.keys.message_hash
        try:
            # Each partition's error is caught in its own operation: together ends at the
            # first error that leaves one, which would lose the other partitions' answers.
            answers = yield from guarded(operation, key, together(
                [_unless_unreachable(guarded(operation, key, part.due_in(part_claim.order)))
                 for part, part_claim in claims]))
        except RedisOperationError as error:
            if not unreachable(error):
                raise
            # The round failed as a whole (the asyncio driver's Cluster pipeline does when a
            # node is down): which partition failed is unknown, so claim each in turn.
            return claims, None
        due: list[int] = []
        for (part, _), answer in zip(claims, answers, strict=True):
            failed = isinstance(answer, RedisOperationError)
            self._note(spread, part, answer if failed else None)
            due.append(-1 if failed else answer)  # (-1: not claimed this round)
        later = [(ms, at) for at, ms in enumerate(due) if ms > 0]
        if later:
            ms, at = min(later)
            self._due_hint = (claims[at][0], time.monotonic() + ms / 1000)
        return ([c for c, ms in zip(claims, due, strict=True) if ms == 0],
                min(later)[0] if later else None)

    def _note(self, spread: Spread, part: QueueCore, error: RedisOperationError | None) -> None:
        """Note whether ``part`` could be reached this round (``error``: it could not)."""
        if error is not None:
            spread.skip(error)
            self._unreachable = self._unreachable | {part}
        elif part in self._unreachable:
            self._unreachable = self._unreachable - {part}

    def _hinted(self, claims: list[tuple[QueueCore, Claim]]
                ) -> tuple[list[tuple[QueueCore, Claim]], bool, bool]:
        """The claims in the order to try them, whether to ask every partition first (the
        queue is sparse), and whether a hint ordered them: once the partition the last
        ``due.lua`` round named has its message due, it is claimed first, directly (one round
        trip where asking would take two: a waiting pop woken by that due time gets it at
        once)."""
        hint = self._due_hint
        if hint is None or time.monotonic() < hint[1]:
            return claims, self._sparse, False
        self._due_hint = None
        first = [c for c in claims if c[0] is hint[0]]
        if not first:
            return claims, self._sparse, False
        return first + [c for c in claims if c[0] is not hint[0]], False, True

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


def unreachable(error: BaseException) -> bool:
    """Whether a partition's failed call says its node cannot be reached now (down, or its
    slots failing over), not that the call was wrong: a pop goes on without that partition."""
    return isinstance(error, ConnectionFailedError) or (
        type(error) is RedisOperationError and isinstance(error.__cause__, _NODE_DOWN))


def _as_connection_failed(error: RedisOperationError) -> ConnectionFailedError:
    """An unreachable partition's error as the pop raises it, always a ConnectionFailedError:
    its node's slots failing over, or its pool exhausted by connections to a dead node
    (redis.asyncio 8.0's Cluster node keeps one per failed connect), say the same to a
    consumer as a refused connection."""
    if isinstance(error, ConnectionFailedError):
        return error
    cause = error.__cause__
    detail = str(cause) or type(cause).__name__
    failed = ConnectionFailedError(f"the Cluster node holding {error.key or 'a partition'}",
                                   detail, operation=error.operation, key=error.key)
    failed.__cause__ = cause
    return failed


def _unless_unreachable(op: Op[T]) -> Op[T | RedisOperationError]:
    """``op``'s result, or its error if that says its partition is unreachable."""
    try:
        return (yield from op)
    except RedisOperationError as error:
        if not unreachable(error):
            raise
        return error


def _earliest(a: int | None, b: int | None) -> int | None:
    """The sooner of two "ms until due" (None: nothing due)."""
    if a is None:
        return b
    return a if b is None else min(a, b)
