"""Consuming: pops (the waiting-pop state machine over claim.lua), claims of one id, and claims
of the first message matching a pattern."""

from __future__ import annotations

import logging
import time
from typing import Any, Protocol, cast

from redis.exceptions import RedisClusterException, RedisError

from ..errors import CallTimeoutError, InvalidArgumentError, QueueClosedError
from ..model import validate
from ..model.keys import QueueKeys
from ..model.luapattern import LuaPattern
from ..model.message import Message
from ..model.settings import QueueSettings
from .deadline import DeadlinePassed
from .failures import timed_out
from .replies import Claim, leased
from .requests import QUORUM, BellState, Budget, Cancelled, Op, Ticket, WaitBell
from .schedules import Scheduling, chain_ticks
from .shared import (
    LATE,
    LIMITED,
    MATCH_PAGE_BYTES,
    MATCH_PAGE_IDS,
    SCRIPT_BATCH,
    QueueState,
    no_events,
)

log = logging.getLogger("dynoqueue.queue")

#: Searches of pop_msg_with_predicate whose match another consumer took first, before None.
_MATCH_CLAIM_ATTEMPTS = 5
#: Waiting pops re-check this often while the doorbell subscription is down.
FALLBACK_POLL_S = 0.05


class Holding(Protocol):
    """What a waiting pop needs of its claim (a :class:`Claim`, or a partitioned pop's)."""

    order: list[int]
    held: dict[str, tuple[Message, int]]

    def messages(self) -> list[Message]: ...


class WaitingPop:
    """The waiting pop's state machine, over any claim that a queue knows how to run
    (:class:`Consuming`: a queue's shards; :class:`~dynoqueue.core.partitioned.PartitionedCore`:
    every partition's). The claim has ``order`` (indices into ``bell_channels``), ``held`` and
    ``messages()``."""

    bell_channels: list[str]
    closed: bool
    keys: QueueKeys
    local_shard: str
    settings: QueueSettings

    def _guarded_claim(self, operation: str, claim: Any,
                       bell: BellState | None = None) -> Op[int | None]:
        """Claim until ``claim`` holds its count (``bell``: the waiting pop's ticket, taken
        before); the ms until the next due message of what was visited (None: none)."""
        raise NotImplementedError

    def release_claim(self, claim: Any) -> Op[None]:
        raise NotImplementedError

    def _waiting_pop(self, operation: str, claim: Holding, enough: int,
                     wait_ms: int) -> Op[list[Message]]:
        """Claim, then wait for a ring, the next due message or the deadline, and claim again,
        until ``enough`` are leased or ``wait_ms`` has passed."""
        deadline = time.monotonic() + wait_ms / 1000
        yield Budget(wait_ms / 1000)  # the call's deadline: the wait plus call_timeout_ms
        channels = [self.bell_channels[i] for i in claim.order]
        while True:
            try:
                bell: BellState = yield Ticket(self, channels)
                next_due_ms = yield from self._guarded_claim(operation, claim, bell)
            except QueueClosedError:  # close() released this waiting pop
                return claim.messages()
            except (CallTimeoutError, DeadlinePassed) as exc:
                if claim.held:  # out of time: hand over what is leased, not strand it
                    return claim.messages()
                if isinstance(exc, CallTimeoutError):
                    raise
                raise timed_out(operation, self.keys.queue_shard(self.local_shard),
                                exc) from exc
            remaining = deadline - time.monotonic()
            if len(claim.held) >= enough or remaining <= 0 or self.closed:
                return claim.messages()
            # Rings wake this pop when the subscription is up; without a doorbell at all
            # (Dynomite) only polling finds new messages. Either way the configured poll
            # interval is the longest sleep; a lost subscription re-checks often instead.
            rings_or_no_bell = bell.listening or not bell.enabled
            sleep = min(remaining, self.settings.poll_interval_ms / 1000
                        if rings_or_no_bell else FALLBACK_POLL_S)
            if next_due_ms is not None:
                sleep = min(sleep, max(next_due_ms, 1) / 1000)
            # A wait that only the deadline ends (listening, nothing due before it) needs no
            # last claim when nothing rang: a consumer popping again claims at once anyway.
            last = bell.listening and sleep >= remaining and (
                next_due_ms is None or next_due_ms / 1000 > remaining)
            try:
                rung = yield WaitBell(self, channels, bell.ticket, sleep)
            except Cancelled:
                yield from self.release_claim(claim)
                raise
            except DeadlinePassed:
                return claim.messages()
            if last and not rung:
                return claim.messages()


class Consuming(QueueState, WaitingPop):
    """pop (every pop of the API), claim_id, claim_match."""

    def pop(self, operation: str, all_shards: bool, count: int, wait_ms: int,
            lease_ms: int | None = None, min_count: int | None = None) -> Op[list[Message]]:
        """Lease up to ``count`` due messages; wait up to ``wait_ms`` until ``min_count`` (default
        ``count``) are leased (the waiting-pop state machine: doorbell tickets, next-due
        wake-ups, the deadline, re-claims)."""
        lease, enough, order = self.pop_plan(all_shards, count, wait_ms, lease_ms, min_count)
        if count == 0:
            return []
        claim = Claim(order, count, lease)
        if wait_ms == 0:
            yield from self._guarded_claim(operation, claim)
            got = claim.messages()
        else:
            got = yield from self._waiting_pop(operation, claim, min(enough, count), wait_ms)
        # A claimed tick queues its schedule's next one (core.schedules); self is a QueueCore,
        # which schedules too.
        core = cast("Scheduling", self)
        return (yield from chain_ticks(core, lambda _id: core, got))

    def pop_plan(self, all_shards: bool, count: int, wait_ms: int, lease_ms: int | None,
                 min_count: int | None) -> tuple[int, int, list[int]]:
        """A pop's arguments checked, for this core's pop and a partitioned one alike: (the
        lease in ms, how many it waits for, the shard indices it claims from in order).

        Raises:
            InvalidArgumentError: an argument out of range.
            QueueClosedError: the queue is closed.
        """
        lease, enough = self._pop_arguments(count, wait_ms, lease_ms, min_count)
        self.check_open()
        order = (self.shards_local_first if all_shards
                 else [self.local_index, *self.adopted_shards()])
        return lease, enough, order

    def _pop_arguments(self, count: int, wait_ms: int, lease_ms: int | None,
                      min_count: int | None) -> tuple[int, int]:
        """A pop's arguments checked: (the lease in ms, how many it waits for).

        Raises:
            InvalidArgumentError: one out of range.
        """
        validate.count("count", count)
        validate.ms("wait_ms", wait_ms)
        lease = self.unack_timeout_ms if lease_ms is None else validate.ms("lease_ms", lease_ms,
                                                                            low=1)
        if min_count is None:
            return lease, count
        enough = validate.count("min_count", min_count, 1)
        if count and enough > count:  # (count 0 returns [] at once, whatever min_count)
            raise InvalidArgumentError(
                f"min_count must be at most count ({count}), got {enough}: a pop never returns "
                "more than count messages")
        return lease, enough

    def _guarded_claim(self, operation: str, claim: Claim,
                       bell: BellState | None = None) -> Op[int | None]:
        """Claim until ``claim`` holds its count; on cancellation put everything this pop
        leased back (including what a claim in flight leased) before re-raising."""
        try:
            next_due: int | None = yield from self.guard(
                operation, self.keys.queue_shard(self.local_shard), self.claim_once(claim))
            return next_due
        except Cancelled:
            yield from self.release_claim(claim)
            raise

    def claim_once(self, claim: Claim) -> Op[int | None]:
        """Claim due messages from the shards in order until ``claim`` holds its count.

        Returns:
            The ms until the next waiting message of those shards is due (None if none waits).
        """
        next_due: int | None = None
        for index in claim.order:
            shard = self.shards[index]
            while len(claim.held) < claim.count:
                ask = min(claim.count - len(claim.held), SCRIPT_BATCH)
                try:
                    result = yield from self.sender.script(
                        QUORUM, "claim", self._life_keys,
                        [self._now_arg(), index + 1, ask, claim.lease_ms], idempotent=False)
                except Cancelled as cancelled:  # the claim ran: what it leased is ours to undo
                    if cancelled.late_reply is not None:
                        claim.take(cancelled.late_reply, shard, claim.lease_ms)
                    raise
                got, missing, undecodable = self._took(claim, result, shard)
                if undecodable:
                    yield from self._bury_undecodable(shard, undecodable)
                due_in = int(result[1])
                if due_in >= 0:
                    next_due = due_in if next_due is None else min(next_due, due_in)
                if got + len(undecodable) + missing < ask:
                    break
            if len(claim.held) >= claim.count:
                break
        return next_due

    def due_in(self, order: list[int]) -> Op[int]:
        """How soon a claim of the shards ``order`` (indices) could lease something: 0 now, else
        the ms until the first waiting message is due or lease ends, -1 when nothing waits and
        nothing is leased (due.lua). Read-only, on the quorum connection (claims read there)."""
        keys = [key for i in order for key in (self.keys.queue_shard(self.shards[i]),
                                               self.keys.unack_shard(self.shards[i]),
                                               self.keys.ready_shard(self.shards[i]))]
        reply = yield from self.sender.script(QUORUM, "due", keys, [self._now_arg()],
                                              idempotent=True)
        return int(reply)

    def _took(self, claim: Claim, result: Any, shard: str) -> tuple[int, int, list[str]]:
        """Take a claim reply into ``claim`` and tell the events. Returns: how many it leased,
        how many ids it found without payload, the ids whose JSON does not decode."""
        got, undecodable, late = claim.take(result, shard, claim.lease_ms,
                                            self.events is not no_events)
        self.events(self.name, "delivered", got)
        for ms in late:
            self.events(self.name, LATE, ms)
        missing = int(result[2])
        if missing:
            self._payload_missing(shard, missing)
        if int(result[3]):  # the queue's limits held back a due message
            self.events(self.name, LIMITED, 1)
        return got, missing, undecodable

    def _bury_undecodable(self, shard: str, ids: list[str]) -> Op[None]:
        """Dead-letter the claimed ``ids`` whose JSON does not decode."""
        pairs = [part for mid in ids for part in (mid, "")]
        yield from self.sender.script(QUORUM, "bury", self._life_keys,
                                      [self._now_arg(), "undecodable", "", *pairs],
                                      idempotent=True)
        log.warning("queue %s shard %s: dead-lettered %d undecodable messages",
                    self.name, shard, len(ids))
        self.events(self.name, "dead_lettered", len(ids))

    def release_claim(self, claim: Claim) -> Op[None]:
        """Put back what a cancelled pop leased (best effort: failing, the leases expire)."""
        pairs = claim.release_pairs()
        if not pairs:
            return
        try:
            yield from self.sender.script(QUORUM, "release", self._life_keys,
                                          [self._now_arg(), *pairs], idempotent=True)
        except (RedisError, RedisClusterException, DeadlinePassed) as exc:
            log.warning("queue %s: could not put back %d messages of a cancelled pop "
                        "(they return when their lease expires): %s", self.name,
                        len(pairs) // 2, exc)

    def claim_id(self, operation: str, id: str, all_shards: bool) -> Op[Message | None]:
        validate.message_id(id)
        self.check_open()
        order = self.shards_local_first if all_shards else [self.local_index]
        result = yield from self._script(
            operation, self.keys.message_hash, "claim_id", self._life_keys,
            [self._now_arg(), id, self.unack_timeout_ms, *(i + 1 for i in order)],
            idempotent=False)
        return self._claimed_one(result)

    def claim_match(self, pattern: str, local_only: bool) -> Op[Message | None]:
        """Lease the due message with the lowest score whose JSON matches ``pattern``: pages of
        due messages are read (match_page.lua) and matched here, so no script runs a pattern;
        the match found is then claimed by id, only if it is still due and unchanged
        (claim_match.lua). Every script call is short, and the claim is never repeated."""
        matcher = LuaPattern(validate.pattern(pattern))
        self.check_open()
        order = [self.local_index] if local_only else self.shards_local_first
        operation, key = "pop_msg_with_predicate", self.keys.message_hash
        for _ in range(_MATCH_CLAIM_ATTEMPTS):
            found = yield from self.guard(operation, key, self._first_due_match(matcher, order))
            if found is None:
                return None
            index, id, json = found
            result = yield from self._script(
                operation, key, "claim_match", self._life_keys,
                [self._now_arg(), id, json, self.unack_timeout_ms, index + 1], idempotent=False)
            if result:
                return self._claimed_one(result)
        return None  # every match found was taken or changed before it could be claimed

    def _first_due_match(self, matcher: LuaPattern,
                         order: list[int]) -> Op[tuple[int, Any, Any] | None]:
        """(shard index, id, json) of the lowest-scored due message matching, over ``order``'s
        shards (each read in score order until its first match), or None."""
        best: tuple[float, int, Any, Any] | None = None
        for index in order:
            offset = 0
            while True:
                page = yield from self.sender.script(
                    QUORUM, "match_page", self._life_keys,
                    [self._now_arg(), index + 1, offset, MATCH_PAGE_IDS, MATCH_PAGE_BYTES],
                    idempotent=True)
                hit = None
                for i in range(2, len(page), 3):
                    score = float(page[i + 1])
                    if best is not None and score >= best[0]:
                        hit = False  # nothing later in this shard can beat the best
                        break
                    if page[i + 2] and matcher.search(page[i + 2]):
                        hit = True
                        best = (score, index, page[i], page[i + 2])
                        break
                offset += (len(page) - 2) // 3
                if hit is not None or int(page[1]):
                    break
        return None if best is None else best[1:]

    def _claimed_one(self, result: Any) -> Message | None:
        if isinstance(result, int) and result < 0:  # claim_id: the id had no payload
            self._payload_missing(None, 1)
            return None
        if not result:
            return None
        index, raw, deliveries, now, due = result
        message = leased(raw, self.shards[int(index) - 1], int(deliveries), int(now))
        self.events(self.name, "delivered", 1)
        self.events(self.name, LATE, max(0, int(now) - int(due)))
        return message
