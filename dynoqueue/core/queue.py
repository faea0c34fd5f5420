"""QueueCore: every operation of one named queue, as a generator both APIs run.

Each public method returns an operation (see :mod:`dynoqueue.core`): it validates its input
*before* yielding anything, so bad input never reaches Redis, then yields requests and decodes
their replies. Every state change is one Lua script (``dynoqueue/scripts``) run on the quorum
connection; cheap reads (peek, size, shard sizes, local_get, scans) go to the read connection.
Redis errors surface as :class:`~dynoqueue.errors.RedisOperationError` naming the operation
and key.
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from redis.exceptions import (
    AskError,
    ClusterDownError,
    NoScriptError,
    ReadOnlyError,
    RedisClusterException,
    RedisError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .. import scripts
from ..errors import (
    CallTimeoutError,
    ConfigurationError,
    InvalidArgumentError,
    InvalidMessageError,
    QueueClosedError,
    QuorumNotReachedError,
    RedisOperationError,
)
from ..model import validate
from ..model.keys import QueueKeys
from ..model.luapattern import LuaPattern
from ..model.message import Message, as_text
from ..model.settings import QueueSettings
from ..model.states import DeadLetter, MessageInfo, MessageState, QueuePolicy, decode_record
from .deadline import DeadlinePassed
from .failures import dynomite_error, guarded, timed_out
from .preflight import ServerCheck
from .requests import (
    QUORUM,
    READ,
    BellState,
    Budget,
    Cancelled,
    Command,
    Merge,
    Op,
    Pipeline,
    RefreshSlots,
    Request,
    Scan,
    Sleep,
    Ticket,
    WaitBell,
)

if TYPE_CHECKING:
    from .zones import ZoneWatch

log = logging.getLogger("dynoqueue.queue")

#: Most messages one script call pushes, claims or re-queues: bounds how long Redis is blocked.
SCRIPT_BATCH = 500
#: How concurrent pushes join into one push.lua call: its arguments are now and mode, then 9
#: per message; its reply is now, then a flag per message.
_PUSH_MERGE = Merge(head=2, per_item=9, shared=1, limit=SCRIPT_BATCH)
#: The predicate calls read messages in pages of at most this many ids and (for pops) about
#: this many JSON bytes, and match them in Python (dynoqueue.model.luapattern).
MATCH_PAGE_IDS = 100
MATCH_PAGE_BYTES = 1 << 20
#: Searches of pop_msg_with_predicate whose match another consumer took first, before None.
_MATCH_CLAIM_ATTEMPTS = 5
#: QueueKeys.lifecycle_keys() starts with this many keys that are not per shard.
_FIXED_LIFE_KEYS = 16
#: How many of a shard's earliest ids find_stale_messages checks.
STALE_CHECK_LIMIT = 1000
#: Waiting pops re-check this often while the doorbell subscription is down.
FALLBACK_POLL_S = 0.05
#: Pauses between attempts of a pipelined Cluster write after a failover (MOVED, connection
#: lost): ~7 s in all, longer than a replica takes over with cluster-node-timeout up to ~5 s.
CLUSTER_RETRY_PAUSES_S = (0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.0, 1.0)
#: Cluster replies meaning the slot map is stale or the slot is changing hands (MOVED is an
#: AskError). Matched by type: a pipeline rewrites the message ("Command # 1 ... caused error").
SLOT_MOVED_ERRORS = (AskError, ClusterDownError, TryAgainError, ReadOnlyError)
_NODE_LOST = (RedisConnectionError, RedisTimeoutError, *SLOT_MOVED_ERRORS)
_SET_TIMEOUT_ATTEMPTS = 5
#: Most batches of expired leases one unack pass puts back per adopted (orphaned) shard: the
#: survivors share that work, and a pass must not stall on a dead zone's backlog.
ADOPTED_REQUEUE_BATCHES = 4
#: Longest error text a nack records (longer ones are cut): it is kept with the message.
_MAX_ERROR_CHARS = 4096
#: What a queue made without a factory checks of its server: nothing.
_NO_SERVER_CHECK = ServerCheck("off")
#: Pauses before repeating an idempotent call that Dynomite answered with its own error (no
#: quorum, a rack's redis unreachable): ~2.5 s in all, a quick redis-server restart plus the
#: second Dynomite waits before it reconnects to it.
DYNOMITE_RETRY_PAUSES_S = (0.05, 0.1, 0.2, 0.4, 0.8, 1.0)
class QueueCore:
    """The operations of one queue over all shards (the logic behind both DynoQueue classes).

    Args:
        name: the queue name.
        settings: the factory's validated settings.
        quorum_cluster: the quorum client is a Redis Cluster client.
        replica_reads: the read client is a Cluster client that reads from replicas (read
            scripts then run as ``EVALSHA_RO`` on a replica of the queue's slot).

    Raises:
        ConfigurationError: a bad queue name.
    """

    def __init__(self, name: str, settings: QueueSettings, *, quorum_cluster: bool,
                 replica_reads: bool, policy: QueuePolicy | None = None) -> None:
        self.keys = QueueKeys(settings.key_prefix, name, settings.shards, bool(settings.hash_tag))
        self.name = name
        self.settings = settings
        self.shards = list(settings.shards)
        self.local_shard = settings.local_shard
        self.unack_timeout_ms = settings.unack_timeout_ms
        #: The policy this process was configured with (None: whatever the queue has stored).
        self.policy = policy if policy is not None else settings.policy
        self._policy_checked = self.policy is None
        self._local = self.shards.index(self.local_shard)
        self._shard_pos: dict[str, int] = {}  # shard -> its first index
        for i, shard in enumerate(self.shards):
            self._shard_pos.setdefault(shard, i)
        self._local_first = [self._local] + [i for i in range(len(self.shards))
                                             if i != self._local]
        self._strategy = settings.strategy
        self._scripts = scripts.load(settings.doorbell)
        self._life_keys = self.keys.lifecycle_keys()
        self._life_heads: dict[str, tuple[Any, ...]] = {}  # see _call_head
        self._quorum_cluster = quorum_cluster
        self._replica_reads = replica_reads
        self._ro_supported = True  # EVALSHA_RO exists (Redis >= 7)
        self._clock = settings.clock
        #: Every shard's doorbell channel: what this queue's doorbell listener subscribes to.
        self.bell_channels = [self.keys.doorbell(s) for s in self.shards]
        #: No new pops or pushes (close()); acks, lease changes and removes still work.
        self.closed = False
        #: The factory closed its connections: every call is refused.
        self.detached = False
        #: Told ``events(queue, kind, count)`` after an operation succeeds, with kind one of
        #: pushed, delivered, acked, nacked, redelivered, dead_lettered, expired,
        #: payload_missing (dead-lettered: found without payload) (no I/O: see
        #: dynoqueue.metrics; set through the factory's ``set_events``); and, once per message
        #: a pop delivered, ``late_ms`` with count = its lateness (claim time - due ms, >= 0).
        self.events: Callable[[str, str, int], None] = no_events
        #: The factory's queue registry and zone heartbeat (None: this queue registers
        #: nothing and adopts no shard).
        self.zones: ZoneWatch | None = None
        #: The factory's server check, run before this queue's first call if not done yet.
        self.server_check = _NO_SERVER_CHECK

    def __repr__(self) -> str:
        return f"DynoQueue({self.name!r}, shards={self.shards}, local={self.local_shard!r})"

    # ----------------------------------------------------------------------------- producing

    def push(self, messages: Iterable[Message], if_exists: str = "replace") -> Op[list[str]]:
        batch = self._push_batch(messages, if_exists)
        return (yield from self.push_validated(batch, if_exists))

    def push_validated(self, batch: list[Message], if_exists: str) -> Op[list[str]]:
        """:meth:`push` of a batch :meth:`push_call` has validated (not validated again)."""
        if not batch:
            return []
        self._check_open()
        flags = yield from self._push("push", if_exists, batch)
        return _ids_pushed(batch, flags)

    def push_call(self, messages: Iterable[Message],
                  if_exists: str = "replace") -> tuple[list[Message], Command | None]:
        """:meth:`push` without an operation when all it does is one script call (the usual
        producer's call): the validated batch and that call's command, the first request
        ``push_validated(batch, if_exists)`` would yield; :meth:`pushed` reads its reply. The
        command is None when the push needs more (an empty batch, over SCRIPT_BATCH messages,
        a write quorum, the first call's checks, the queue registry): run
        ``push_validated(batch, if_exists)``. A driver that fails to send the command throws
        that error into ``push_validated(batch, if_exists)`` at its first request and runs it
        on from there (NOSCRIPT, retries and typed errors as always). Raises as :meth:`push`
        does for bad input or a closed queue."""
        batch = self._push_batch(messages, if_exists)
        if (not batch or len(batch) > SCRIPT_BATCH or self.settings.write_quorum
                or self.detached or not self._first_checks_done()
                or (self.zones is not None and not self.zones.registered(self.name))):
            return batch, None
        self._check_open()
        head = self._call_head("push", self._life_keys)
        return batch, Command(QUORUM, (*head, *self._push_args(if_exists, batch)),
                              merge=_PUSH_MERGE.after(len(head)), head=head)

    def pushed(self, batch: list[Message], reply: Any) -> list[str]:
        """The result of :meth:`push_call`'s command: the ids pushed, in input order."""
        if len(batch) == 1 and len(reply) == 2:  # one message (the usual call): its flag
            pushed = int(reply[1]) != 0
            self.events(self.name, "pushed", int(pushed))
            return [batch[0].id] if pushed else []
        return _ids_pushed(batch, self._push_flags([reply]))

    def _push_batch(self, messages: Iterable[Message], if_exists: str) -> list[Message]:
        if if_exists not in ("replace", "keep"):
            raise InvalidArgumentError(f"if_exists must be 'replace' or 'keep', got {if_exists!r}")
        return self._validated(messages)

    def ensure(self, message: Message) -> Op[bool]:
        (message,) = self._validated([message])
        self._check_open()
        (pushed,) = yield from self._push("ensure", "ensure", [message])
        return pushed

    def _push_args(self, mode: str, batch: list[Message]) -> list[Any]:
        """push.lua's ARGV: now, mode, then 9 per message."""
        args: list[Any] = [self._now_arg(), mode]
        for m in batch:
            args += (m.id, m.to_json(), m.timeout, m.priority, self._shard_index(m) + 1,
                     "" if m.due_at_ms is None else m.due_at_ms,
                     "" if m.max_deliveries is None else m.max_deliveries,
                     "" if m.ttl_ms is None else m.ttl_ms, m.group or "")
        return args

    def _push_flags(self, replies: list[Any]) -> list[bool]:
        """Whether each message was pushed, from push.lua's replies; tells the events."""
        flags = [bool(int(flag)) for reply in replies for flag in reply[1:]]
        self.events(self.name, "pushed", sum(flags))
        return flags

    def _push(self, operation: str, mode: str, batch: list[Message]) -> Op[list[bool]]:
        args = self._push_args(mode, batch)
        keys = self._life_keys
        if self.zones is not None and not self.zones.registered(self.name):
            # Before the data, so a queue that holds messages is always in the registry.
            yield from self._guard(operation, self.keys.message_hash,
                                   self.zones.register([self.name]))
        if len(batch) <= SCRIPT_BATCH:
            # Concurrent pushes may join into one script call (the asyncio driver's
            # auto-pipelining; up to SCRIPT_BATCH messages); each still gets its own flags.
            replies = yield from self._write(operation, "push", [(keys, args)],
                                             merge=_PUSH_MERGE)
        else:
            step = SCRIPT_BATCH * 9
            chunks = [args[i:i + step] for i in range(2, len(args), step)]
            # The first chunk fixes "now" for the whole batch; the rest reuse it.
            first = yield from self._write(
                operation, "push", [(keys, [args[0], mode, *chunks[0]])], replicate=False)
            now = first[0][0]
            replies = first + (yield from self._write(
                operation, "push", [(keys, [str(now), mode, *c]) for c in chunks[1:]]))
        return self._push_flags(replies)

    # ----------------------------------------------------------------------------- consuming

    def pop(self, operation: str, all_shards: bool, count: int, wait_ms: int,
            lease_ms: int | None = None, min_count: int | None = None) -> Op[list[Message]]:
        """Lease up to ``count`` due messages; wait up to ``wait_ms`` until ``min_count`` (default
        ``count``) are leased (the waiting-pop state machine: doorbell tickets, next-due
        wake-ups, the deadline, re-claims)."""
        validate.count("count", count)
        validate.ms("wait_ms", wait_ms)
        lease = self.unack_timeout_ms if lease_ms is None else validate.ms("lease_ms", lease_ms,
                                                                            low=1)
        enough = count if min_count is None else validate.count("min_count", min_count, 1)
        self._check_open()
        order = self._local_first if all_shards else [self._local, *self._adopted()]
        if count == 0:
            return []
        claim = _Claim(order, count, lease)
        if wait_ms == 0:
            yield from self._guarded_claim(operation, claim)
            return claim.messages()
        deadline = time.monotonic() + wait_ms / 1000
        yield Budget(wait_ms / 1000)  # the call's deadline: the wait plus call_timeout_ms
        channels = [self.bell_channels[i] for i in order]
        while True:
            try:
                bell: BellState = yield Ticket(self, channels)
                next_due_ms = yield from self._guarded_claim(operation, claim)
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
            if len(claim.held) >= min(enough, count) or remaining <= 0 or self.closed:
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
                yield from self._release(claim)
                raise
            except DeadlinePassed:
                return claim.messages()
            if last and not rung:
                return claim.messages()

    def _guarded_claim(self, operation: str, claim: _Claim) -> Op[int | None]:
        """Claim until ``claim`` holds its count; on cancellation put everything this pop
        leased back (including what a claim in flight leased) before re-raising."""
        try:
            next_due: int | None = yield from self._guard(
                operation, self.keys.queue_shard(self.local_shard), self._claim_once(claim))
            return next_due
        except Cancelled:
            yield from self._release(claim)
            raise

    def _claim_once(self, claim: _Claim) -> Op[int | None]:
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
                    result = yield from self._script(
                        QUORUM, "claim", self._life_keys,
                        [self._now_arg(), index + 1, ask, claim.lease_ms], idempotent=False)
                except Cancelled as cancelled:  # the claim ran: what it leased is ours to undo
                    if cancelled.late_reply is not None:
                        claim.take(cancelled.late_reply, shard, claim.lease_ms)
                    raise
                got, undecodable, late = claim.take(result, shard, claim.lease_ms,
                                                    self.events is not no_events)
                self.events(self.name, "delivered", got)
                for ms in late:
                    self.events(self.name, LATE, ms)
                missing = int(result[2])
                if missing:
                    self._payload_missing(shard, missing)
                if undecodable:
                    pairs = [part for mid in undecodable for part in (mid, "")]
                    yield from self._script(QUORUM, "bury", self._life_keys,
                                            [self._now_arg(), "undecodable", "", *pairs],
                                            idempotent=True)
                    log.warning("queue %s shard %s: dead-lettered %d undecodable messages",
                                self.name, shard, len(undecodable))
                    self.events(self.name, "dead_lettered", len(undecodable))
                due_in = int(result[1])
                if due_in >= 0:
                    next_due = due_in if next_due is None else min(next_due, due_in)
                if got + len(undecodable) + missing < ask:
                    break
            if len(claim.held) >= claim.count:
                break
        return next_due

    def _release(self, claim: _Claim) -> Op[None]:
        """Put back what a cancelled pop leased (best effort: failing, the leases expire)."""
        pairs = [part for message, _ in claim.held.values()
                 for part in (message.id, message.receipt or "")]
        claim.held.clear()
        if not pairs:
            return
        try:
            yield from self._script(QUORUM, "release", self._life_keys,
                                    [self._now_arg(), *pairs], idempotent=True)
        except (RedisError, RedisClusterException, DeadlinePassed) as exc:
            log.warning("queue %s: could not put back %d messages of a cancelled pop "
                        "(they return when their lease expires): %s", self.name,
                        len(pairs) // 2, exc)

    def release(self, ids: Iterable[str | Message]) -> Op[int]:
        pairs = _id_receipt_pairs("release", ids)
        self._check_attached()
        if not pairs:
            return 0
        step = SCRIPT_BATCH * 2
        replies = yield from self._write("release", "release", [
            (self._life_keys, [self._now_arg(), *pairs[i:i + step]])
            for i in range(0, len(pairs), step)])
        return sum(int(n) for n in replies)

    def claim_id(self, operation: str, id: str, all_shards: bool) -> Op[Message | None]:
        validate.message_id(id)
        self._check_open()
        order = self._local_first if all_shards else [self._local]
        result = yield from self._guard(operation, self.keys.message_hash, self._script(
            QUORUM, "claim_id", self._life_keys,
            [self._now_arg(), id, self.unack_timeout_ms, *(i + 1 for i in order)],
            idempotent=False))
        return self._claimed_one(result)

    def claim_match(self, pattern: str, local_only: bool) -> Op[Message | None]:
        """Lease the due message with the lowest score whose JSON matches ``pattern``: pages of
        due messages are read (match_page.lua) and matched here, so no script runs a pattern;
        the match found is then claimed by id, only if it is still due and unchanged
        (claim_match.lua). Every script call is short, and the claim is never repeated."""
        matcher = LuaPattern(validate.pattern(pattern))
        self._check_open()
        order = [self._local] if local_only else self._local_first
        operation, key = "pop_msg_with_predicate", self.keys.message_hash
        for _ in range(_MATCH_CLAIM_ATTEMPTS):
            found = yield from self._guard(operation, key, self._first_due_match(matcher, order))
            if found is None:
                return None
            index, id, json = found
            result = yield from self._guard(operation, key, self._script(
                QUORUM, "claim_match", self._life_keys,
                [self._now_arg(), id, json, self.unack_timeout_ms, index + 1], idempotent=False))
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
                page = yield from self._script(
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

    def ack_many(self, ids: Iterable[str | Message]) -> Op[int]:
        pairs = _id_receipt_pairs("ack_many", ids)
        self._check_attached()
        if not pairs:
            return 0
        step = SCRIPT_BATCH * 2
        calls = [(self._life_keys, [self._now_arg(), *pairs[i:i + step]])
                 for i in range(0, len(pairs), step)]
        acked = sum(int(n) for n in (yield from self._write("ack", "ack", calls)))
        self.events(self.name, "acked", acked)
        return acked

    def ack(self, id: str, receipt: str | None = None) -> Op[bool]:
        validate.message_id(id)
        receipt = _receipt(receipt)
        self._check_attached()
        (acked,) = yield from self._write("ack", "ack",
                                          [(self._life_keys, [self._now_arg(), id, receipt])])
        self.events(self.name, "acked", int(acked))
        return int(acked) == 1

    def nack(self, id: str, delay_ms: int = 0, error: str | None = None,
             receipt: str | None = None) -> Op[bool]:
        validate.message_id(id)
        ended = yield from self._nack("nack", [id, _receipt(receipt)], delay_ms, error)
        return ended == 1

    def nack_many(self, ids: Iterable[str | Message], delay_ms: int = 0,
                  error: str | None = None) -> Op[int]:
        pairs = _id_receipt_pairs("nack_many", ids)
        return (yield from self._nack("nack", pairs, delay_ms, error))

    def _nack(self, operation: str, pairs: list[str], delay_ms: int,
              error: str | None) -> Op[int]:
        validate.ms("delay_ms", delay_ms)
        if error is not None:
            validate.text("error", error)
        self._check_attached()
        if not pairs:
            return 0
        head = [self._now_arg(), delay_ms, (error or "")[:_MAX_ERROR_CHARS]]
        step = SCRIPT_BATCH * 2
        replies = yield from self._write(operation, "nack", [
            (self._life_keys, [*head, *pairs[i:i + step]]) for i in range(0, len(pairs), step)])
        again, dead, missing = (sum(int(reply[i]) for reply in replies) for i in (0, 1, 2))
        self.events(self.name, "nacked", again)
        self.events(self.name, "dead_lettered", dead - missing)
        self._payload_missing(None, missing)
        return again + dead

    def set_lease(self, operation: str, id: str, timeout_ms: int, *,
                  only_if_shorter: bool, receipt: str | None = None) -> Op[bool]:
        validate.message_id(id)
        pairs = [id, _receipt(receipt)]
        return (yield from self._set_leases(operation, pairs, timeout_ms, only_if_shorter)) == 1

    def set_lease_many(self, ids: Iterable[str | Message], timeout_ms: int) -> Op[int]:
        pairs = _id_receipt_pairs("set_unack_timeout_many", ids)
        return (yield from self._set_leases("set_unack_timeout_many", pairs, timeout_ms, False))

    def _set_leases(self, operation: str, pairs: list[str], timeout_ms: int,
                    only_if_shorter: bool) -> Op[int]:
        validate.ms("timeout_ms", timeout_ms)
        self._check_attached()
        if not pairs:
            return 0
        head = [self._now_arg(), timeout_ms, "1" if only_if_shorter else "0"]
        step = SCRIPT_BATCH * 2
        replies = yield from self._write(operation, "set_unack_timeout", [
            (self._life_keys, [*head, *pairs[i:i + step]]) for i in range(0, len(pairs), step)])
        return sum(int(n) for n in replies)

    def dead_letter(self, id: str, reason: str, error: str | None = None,
                    receipt: str | None = None) -> Op[bool]:
        validate.message_id(id)
        validate.text("reason", reason, empty=False)
        if error is not None:
            validate.text("error", error)
        pairs = [id, _receipt(receipt)]
        self._check_attached()
        ((buried, missing),) = yield from self._write("dead_letter", "bury", [(self._life_keys, [
            self._now_arg(), reason[:200], (error or "")[:_MAX_ERROR_CHARS], *pairs])])
        self.events(self.name, "dead_lettered", int(buried))
        self._payload_missing(None, int(missing))
        return int(buried) == 1

    def postpone(self, id: str, delay_ms: int, priority: int | None) -> Op[bool]:
        validate.message_id(id)
        validate.ms("delay_ms", delay_ms)
        if priority is not None and (not validate.is_int(priority) or not 0 <= priority <= 99):
            raise InvalidArgumentError(f"priority must be None or an int in 0..99, "
                                       f"got {priority!r}")
        self._check_attached()
        for _ in range(_SET_TIMEOUT_ATTEMPTS):
            raw = yield from self._guard("postpone", self.keys.message_hash, self._command(
                QUORUM, "HGET", self.keys.message_hash, id))
            if raw is None:
                return False
            stored = Message.from_json(raw)
            stored.timeout = delay_ms
            if priority is not None:
                stored.priority = priority
            (status,) = yield from self._write("postpone", "postpone", [(self._life_keys, [
                self._now_arg(), id, delay_ms, stored.priority, raw, stored.to_json()])])
            if int(status) >= 0:
                return int(status) == 1
        raise RedisOperationError(
            "postpone", self.keys.message_hash,
            f"message {id!r} kept changing during {_SET_TIMEOUT_ATTEMPTS} attempts")

    def set_timeout(self, id: str, timeout_ms: int) -> Op[bool]:
        validate.message_id(id)
        validate.ms("timeout_ms", timeout_ms)
        self._check_attached()
        for _ in range(_SET_TIMEOUT_ATTEMPTS):
            raw = yield from self._guard("set_timeout", self.keys.message_hash, self._command(
                QUORUM, "HGET", self.keys.message_hash, id))
            if raw is None:
                return False
            old = Message.from_json(raw)
            old.timeout = timeout_ms
            args = [self._now_arg(), id, timeout_ms, old.priority, raw, old.to_json()]
            (status,) = yield from self._write("set_timeout", "set_timeout",
                                               [(self._life_keys, args)])
            if int(status) >= 0:
                return int(status) == 1
        raise RedisOperationError(
            "set_timeout", self.keys.message_hash,
            f"message {id!r} kept changing during {_SET_TIMEOUT_ATTEMPTS} attempts")

    def remove(self, id: str) -> Op[bool]:
        validate.message_id(id)
        self._check_attached()
        (removed,) = yield from self._write("remove", "remove",
                                            [(self._life_keys, [self._now_arg(), id])])
        return bool(removed)

    # ----------------------------------------------------------------------------- lifecycle

    def state(self, id: str) -> Op[MessageState | None]:
        info = yield from self.info(id)
        return None if info is None else info.state

    def info(self, id: str) -> Op[MessageInfo | None]:
        validate.message_id(id)
        self._check_attached()
        reply = yield from self._guard("info", self.keys.message_hash, self._script(
            QUORUM, "inspect", self._life_keys, [self._now_arg(), id], idempotent=True))
        if not reply:
            return None
        state = MessageState[as_text(reply[0])]
        index, json, score, life, expires, ended_at, record, stored_max = reply[1:9]
        shard = self.shards[int(index) - 1] if int(index) else None
        rec = decode_record(life or record)
        raw = json or rec.get("j")
        message = _decoded(raw, shard)
        leased = state is MessageState.LEASED
        due = None if leased or not score else int(float(score))
        if state in (MessageState.ACKED, MessageState.EXPIRED, MessageState.DELETED,
                     MessageState.DEAD):
            shard = self._shard_at(rec.get("sh"))
        return MessageInfo(
            id=id, state=state, shard=shard,
            priority=message.priority if message else 0,
            payload=message.payload if message else None,
            deliveries=int(rec.get("d") or 0),
            max_deliveries=_max_deliveries(rec.get("m"), int(stored_max)),
            enqueued_at_ms=_int_or_none(rec.get("e")),
            due_at_ms=due,
            lease_expires_at_ms=int(float(score)) if leased and score else None,
            expires_at_ms=_int_or_none(expires),
            ended_at_ms=_int_or_none(ended_at),
            last_error=rec.get("l"),
            group=message.group if message else None,
        )

    def group_info(self, group: str) -> Op[dict[str, Any]]:
        validate.text("group", group, empty=False)
        self._check_attached()
        waiting, leased, due, index = yield from self._guard(
            "group_info", self.keys.group_head, self._script(
                QUORUM, "group_info", self._life_keys,
                [self._now_arg(), group, self._group_shard(group) + 1], idempotent=True))
        return {"waiting": int(waiting), "leased": as_text(leased) if leased else None,
                "next_due_ms": _int_or_none(due), "shard": self.shards[int(index) - 1]}

    def dead_letters(self, count: int) -> Op[list[DeadLetter]]:
        validate.count("count", count)
        self._check_attached()
        if count == 0:
            return []
        flat = yield from self._guard("dead_letters", self.keys.dead, self._read_script(
            "dead_list", [self.keys.dead, self.keys.dead_info], [count]))
        out = []
        for i in range(0, len(flat), 3):
            rec = decode_record(flat[i + 2])
            shard = self._shard_at(rec.get("sh"))
            message = _decoded(rec.get("j"), shard) or Message(as_text(flat[i]), shard=shard)
            message.deliveries = int(rec.get("d") or 0)
            out.append(DeadLetter(message=message, reason=str(rec.get("r", "")),
                                  deliveries=message.deliveries, last_error=rec.get("l"),
                                  died_at_ms=int(float(flat[i + 1]))))
        return out

    def dead_size(self) -> Op[int]:
        self._check_attached()
        size = yield from self._guard("dead_size", self.keys.dead,
                                      self._command(READ, "ZCARD", self.keys.dead))
        return int(size)

    def redrive(self, ids: Iterable[str] | None, delay_ms: int) -> Op[int]:
        validate.ms("delay_ms", delay_ms)
        chosen = None if ids is None else [
            validate.message_id(i)
            for i in validate.listed("redrive takes a list of ids (or None for all)", ids,
                                         single=(Message,))]
        self._check_attached()
        moved = 0
        if chosen is not None:
            for i in range(0, len(chosen), SCRIPT_BATCH):
                (n,) = yield from self._write("redrive", "redrive", [(self._life_keys, [
                    self._now_arg(), delay_ms, SCRIPT_BATCH, *chosen[i:i + SCRIPT_BATCH]])])
                moved += int(n)
            return moved
        while True:  # all of them, oldest first, a batch per script call
            (n,) = yield from self._write("redrive", "redrive", [(self._life_keys, [
                self._now_arg(), delay_ms, SCRIPT_BATCH])])
            moved += int(n)
            if int(n) < SCRIPT_BATCH:
                return moved

    def purge_dead(self) -> Op[int]:
        self._check_attached()
        keys = [self.keys.dead, self.keys.dead_info]
        purged = 0
        while True:
            (n,) = yield from self._write("purge_dead", "purge_dead", [(keys, [SCRIPT_BATCH])])
            purged += int(n)
            if int(n) < SCRIPT_BATCH:
                return purged

    # ----------------------------------------------------------------------------- reading

    def peek(self, operation: str, all_shards: bool, count: int) -> Op[list[Message]]:
        validate.count("count", count)
        self._check_attached()
        if count == 0:
            return []
        order = self._local_first if all_shards else [self._local]
        keys = [self.keys.message_hash, self.keys.policy]
        for i in order:
            keys += [self.keys.queue_shard(self.shards[i]), self.keys.ready_shard(self.shards[i])]
        flat = yield from self._guard(operation, keys[2], self._read_script(
            "peek", keys, [self._now_arg(), count]))
        return [Message.from_json(flat[i + 1], shard=self.shards[order[int(flat[i]) - 1]])
                for i in range(0, len(flat), 2)]

    def contains(self, id: str) -> Op[bool]:
        validate.message_id(id)
        self._check_attached()
        found = yield from self._guard("contains", self.keys.message_hash, self._command(
            QUORUM, "HEXISTS", self.keys.message_hash, id))
        return bool(found)

    def get(self, operation: str, id: str, local: bool) -> Op[Message | None]:
        validate.message_id(id)
        self._check_attached()
        raw = yield from self._guard(operation, self.keys.message_hash, self._command(
            READ if local else QUORUM, "HGET", self.keys.message_hash, id))
        return None if raw is None else Message.from_json(raw)

    def get_all_messages(self) -> Op[list[Message]]:
        self._check_attached()
        key = self.keys.message_hash
        pairs = yield from self._guard("get_all_messages", key, self._scan(key))
        return [Message.from_json(raw) for _, raw in pairs]

    def find_match(self, pattern: str, local_only: bool) -> Op[str | None]:
        """The first message (in HSCAN order) whose JSON matches ``pattern``: the hash is read
        a page at a time on the read connection and matched here (no script runs a pattern);
        with ``local_only``, find_match.lua keeps the first match waiting in the local shard."""
        matcher = LuaPattern(validate.pattern(pattern))
        self._check_attached()
        local = self.local_shard
        keys = [self.keys.message_hash, self.keys.queue_shard(local), self.keys.ready_shard(local),
                self.keys.group_of, self.keys.group_line_base, self.keys.group_head]
        operation, cursor = "get_msg_with_predicate", 0
        while True:
            reply = yield from self._guard(operation, keys[0], self._command(
                READ, "HSCAN", keys[0], cursor, "COUNT", MATCH_PAGE_IDS))
            cursor, pairs = _hscan_page(reply)
            hits = [as_text(field) for field, json in pairs if json and matcher.search(json)]
            if hits and not local_only:
                return hits[0]
            if hits:
                found = yield from self._guard(operation, keys[0], self._read_script(
                    "find_match", keys, [self._local + 1, *hits]))
                if found:
                    return as_text(found)
            if cursor == 0:
                return None

    def contains_match(self, pattern: str, local_only: bool) -> Op[bool]:
        return (yield from self.find_match(pattern, local_only)) is not None

    def size(self) -> Op[int]:
        return sum(s["size"] for s in (yield from self.shard_sizes()).values())

    def shard_sizes(self) -> Op[dict[str, dict[str, int]]]:
        self._check_attached()
        keys = [*self._life_keys[_FIXED_LIFE_KEYS:], self.keys.group_waiting]
        counts = yield from self._guard("shard_sizes", keys[0], self._read_script(
            "sizes", keys, []))
        return {shard: {"size": int(counts[2 * i]), "uacked": int(counts[2 * i + 1])}
                for i, shard in enumerate(self.shards)}

    def find_stale_messages(self) -> Op[list[Message]]:
        self._check_attached()
        out: list[Message] = []
        for shard in self.shards:
            keys = [self.keys.message_hash, self.keys.queue_shard(shard),
                    self.keys.unack_shard(shard), self.keys.ready_shard(shard)]
            ids = yield from self._guard("find_stale_messages", keys[1], self._read_script(
                "find_stale", keys, [STALE_CHECK_LIMIT]))
            out += [Message(as_text(i), shard=shard) for i in ids]
        return out

    # ----------------------------------------------------------------------------- upkeep

    def process_unacks(self) -> Op[int]:
        """Put back expired leases of the local shard, then of the orphaned shards the factory
        adopts (at most :data:`ADOPTED_REQUEUE_BATCHES` batches each per pass), dead-lettering
        those at their max deliveries; then the lifecycle sweep: TTL expiry, retention ends,
        orphaned records."""
        self._check_attached()
        requeued = stale = dead = 0
        for index in [self._local, *self._adopted()]:
            batches = 0
            while True:
                (result,) = yield from self._write(
                    "process_unacks", "requeue_expired",
                    [(self._life_keys, [self._now_arg(), index + 1, SCRIPT_BATCH])],
                    replicate=False)
                requeued += int(result[0])
                stale += int(result[1])
                dead += int(result[3])
                batches += 1
                if not int(result[2]) or (index != self._local
                                          and batches >= ADOPTED_REQUEUE_BATCHES):
                    break
        while True:
            (swept,) = yield from self._write(
                "process_unacks", "sweep", [(self._life_keys, [self._now_arg(), SCRIPT_BATCH])],
                replicate=False)
            self.events(self.name, "expired", int(swept[0]))
            self.events(self.name, "dead_lettered", int(swept[1]))
            if any(int(n) for n in swept[:5]):
                log.info("queue %s: %d expired, %d dead-lettered by TTL, %d ended and %d dead "
                         "letters past retention dropped, %d orphaned records swept",
                         self.name, *(int(n) for n in swept[:5]))
            if not int(swept[5]):
                break
        self._payload_missing(self.local_shard, stale)
        self.events(self.name, "redelivered", requeued)
        self.events(self.name, "dead_lettered", dead)
        if requeued or dead:
            log.info("queue %s shard %s: %d expired leases put back, %d dead-lettered",
                     self.name, self.local_shard, requeued, dead)
        return requeued

    def clear(self) -> Op[None]:
        self._check_open()
        keys = [self.keys.group_head, self.keys.group_line_base, *self.keys.every_key()]
        yield from self._guard("clear", keys[0], self._script(QUORUM, "clear", keys, [],
                                                               idempotent=True))
        if self.zones is not None:
            yield from self._guard("clear", keys[0], self.zones.forget(self.name))
        # The stored policy went too: store this process's again at its next call.
        self._policy_checked = self.policy is None

    # ----------------------------------------------------------------------------- checks

    def _now_arg(self) -> str:
        if self._clock is None:
            return ""
        now = self._clock()
        try:
            now_ms = int(now)
        except (TypeError, ValueError, OverflowError):
            now_ms = -1
        if not 0 <= now_ms <= validate.MAX_EPOCH_MS:
            raise ConfigurationError(f"clock must return epoch ms in 0..{validate.MAX_EPOCH_MS}, "
                                     f"returned {now!r:.80}")
        return str(now_ms)

    def _check_attached(self) -> None:
        if self.detached:
            raise QueueClosedError(f"queue {self.name!r} is closed (its RedisQueues was closed)")

    def _check_open(self) -> None:
        if self.closed or self.detached:
            raise QueueClosedError(f"queue {self.name!r} is closed")

    def _validated(self, messages: Iterable[Message]) -> list[Message]:
        batch = validate.listed("push takes a list of Message", messages, single=(Message,),
                                error=InvalidMessageError)
        limit = self.settings.max_payload_bytes
        for message in batch:
            if not isinstance(message, Message):
                raise InvalidMessageError(
                    f"push takes Message objects, got {type(message).__name__}: {message!r:.80}")
            message.validate(limit)
        return batch

    def _shard_index(self, message: Message) -> int:
        if message.group is not None:
            return self._group_shard(message.group)
        shards = self.shards
        if self.zones is not None and self.zones.orphaned and getattr(
                self._strategy, "skip_orphaned", False):
            shards = [s for s in shards if s not in self.zones.orphaned]
        shard = self._strategy.get_next_shard(shards, message)
        try:
            return self._shard_pos[shard]
        except (KeyError, TypeError):
            raise ConfigurationError(
                f"sharding strategy chose shard {shard!r}, not one of {self.shards}") from None

    def _adopted(self) -> list[int]:
        """The indices of the orphaned shards this queue's factory adopts now."""
        return [] if self.zones is None else self.zones.adopted(self.shards)

    def _group_shard(self, group: str) -> int:
        """The index of the shard a group's messages live in: CRC32 of its UTF-8 bytes modulo
        the number of shards (as RMQ maps a slotBasis to a slot); the scripts keep a group
        with messages in the shard it already has."""
        return zlib.crc32(group.encode()) % len(self.shards)

    def _shard_at(self, index: Any) -> str | None:
        """The shard a stored record names by its 1-based index (None if it names none)."""
        if isinstance(index, (int, float)) and 1 <= int(index) <= len(self.shards):
            return self.shards[int(index) - 1]
        return None

    def _claimed_one(self, result: Any) -> Message | None:
        if isinstance(result, int) and result < 0:  # claim_id: the id had no payload
            self._payload_missing(None, 1)
            return None
        if not result:
            return None
        index, raw, deliveries, now, due = result
        message = _leased(raw, self.shards[int(index) - 1], int(deliveries), int(now))
        self.events(self.name, "delivered", 1)
        self.events(self.name, LATE, max(0, int(now) - int(due)))
        return message

    def _payload_missing(self, shard: str | None, count: int) -> None:
        """Report ``count`` ids a script found without payload and dead-lettered (reason
        ``payload-missing``): a warning per batch, and the events ``dead_lettered`` and
        ``payload_missing``. Evicted keys are the usual cause (or a payload deleted by hand,
        e.g. a Java client's remove of a grouped message waiting behind its group)."""
        if count <= 0:
            return
        log.warning("queue %s%s: %d ids had no payload (evicted? the server's "
                    "maxmemory-policy must be noeviction or volatile-*); dead-lettered with "
                    "reason payload-missing", self.name,
                    "" if shard is None else f" shard {shard}", count)
        self.events(self.name, "dead_lettered", count)
        self.events(self.name, "payload_missing", count)

    def stored_policy(self) -> Op[QueuePolicy | None]:
        self._check_attached()
        # guarded, not _guard: no first-call policy check (this process's may be the old one)
        raw = yield from guarded("stored_policy", self.keys.policy, self._command(
            QUORUM, "GET", self.keys.policy))
        return None if raw is None else QueuePolicy.from_json(raw)

    def set_policy(self, policy: QueuePolicy) -> Op[QueuePolicy | None]:
        if not isinstance(policy, QueuePolicy):
            raise InvalidArgumentError(f"policy must be a QueuePolicy, got {policy!r:.80}")
        self._check_attached()
        replaced, old = yield from guarded("set_policy", self.keys.policy, self._script(
            QUORUM, "set_policy", [self.keys.policy], [policy.to_json()], idempotent=True))
        previous = QueuePolicy.from_json(old) if old else None
        if not int(replaced):
            raise ConfigurationError(
                f"queue {self.name!r}: strict_priority cannot change on a live queue (stored "
                f"{previous}); drain it into a new queue instead")
        # This process now asks for the new policy: its first-call check agrees with it.
        self.policy, self._policy_checked = policy, True
        return previous

    def _check_policy(self) -> Op[None]:
        """At the first call with an explicit policy: store it unless the queue has one, and
        refuse to go on if what is stored differs (every process must apply the same)."""
        if self._policy_checked or self.policy is None:
            return
        stored = yield from self._script(QUORUM, "policy", [self.keys.policy],
                                         [self.policy.to_json()], idempotent=True)
        if QueuePolicy.from_json(stored) != self.policy:
            raise ConfigurationError(
                f"queue {self.name!r} has policy {QueuePolicy.from_json(stored)} stored, but "
                f"this process was given {self.policy}; configure every process alike")
        self._policy_checked = True

    # ----------------------------------------------------------------------------- I/O steps

    def _guard(self, operation: str, key: str, op: Op[Any]) -> Op[Any]:
        """Run ``op`` while the factory is open, with typed errors (see :func:`guarded`), after
        the policy check of this queue's first call. Raises QueueClosedError at once when the
        factory is closed."""
        self._check_attached()
        if self._first_checks_done():
            return guarded(operation, key, op)  # no generator layer of its own: every call
        return self._checked_first(operation, key, op)

    def _first_checks_done(self) -> bool:
        """Whether this queue's first-call checks (the server's, the stored policy) are done."""
        return self.server_check.done and self._policy_checked

    def _checked_first(self, operation: str, key: str, op: Op[Any]) -> Op[Any]:
        if not self.server_check.done:
            yield from guarded(operation, key, self.server_check.run(key))
        if not self._policy_checked:
            yield from guarded(operation, key, self._check_policy())
        return (yield from guarded(operation, key, op))

    def _command(self, role: str, *args: Any) -> Op[Any]:
        return (yield from self._send(Command(role, args), idempotent=True))

    def _scan(self, key: str) -> Op[list[tuple[Any, Any]]]:
        pairs: list[tuple[Any, Any]] = yield from self._send(Scan(READ, key, 500),
                                                             idempotent=True)
        return pairs

    def _send(self, request: Request, *, idempotent: bool) -> Op[Any]:
        """Send ``request``; if it is ``idempotent``, repeat it after Dynomite's own error
        replies (which do not say whether some racks applied it), up to
        :data:`DYNOMITE_RETRY_PAUSES_S`. Claims are not idempotent: they lease other messages."""
        for pause_s in (*DYNOMITE_RETRY_PAUSES_S, None):
            try:
                return (yield request)
            except ResponseError as exc:
                if not idempotent or pause_s is None or dynomite_error(exc) is None:
                    raise
                log.info("queue %s: %s; retrying in %.2f s", self.name, exc, pause_s)
                yield Sleep(pause_s)
        raise AssertionError("unreachable")  # pragma: no cover

    def _call(self, name: str, keys: list[str], args: list[Any]) -> tuple[Any, ...]:
        """The command running script ``name``: EVALSHA, or EVAL with its text when the
        settings say so (Dynomite: a rack whose redis restarted lost its scripts, and the
        other racks' quorum hides its NOSCRIPT replies)."""
        return (*self._call_head(name, keys), *args)

    def _call_head(self, name: str, keys: list[str]) -> tuple[Any, ...]:
        """The args of a call of script ``name`` before its ARGV (script, key count, keys);
        made once per script for the lifecycle keys, which nearly every write takes."""
        if keys is self._life_keys:
            head = self._life_heads.get(name)
            if head is None:
                head = self._life_heads[name] = self._make_head(name, keys)
            return head
        return self._make_head(name, keys)

    def _make_head(self, name: str, keys: list[str]) -> tuple[Any, ...]:
        script = self._scripts[name]
        if self.settings.eval_scripts:
            return ("EVAL", script.text, len(keys), *keys)
        return ("EVALSHA", script.sha, len(keys), *keys)

    def _script(self, role: str, name: str, keys: list[str], args: list[Any], *,
                idempotent: bool, merge: Merge | None = None) -> Op[Any]:
        """Run script ``name``; a server that lacks it (restarted, failed over, or that evicted
        it) is sent its text with ``SCRIPT LOAD``, then the call again (NOSCRIPT: nothing ran).
        Not with ``EVAL``: Redis 7.4+ and Valkey 8 keep at most 500 scripts sent that way and
        evict the oldest, so a busy server would answer NOSCRIPT again and again.
        ``merge`` (args after the keys: its head counts only those) lets the driver join this
        call with concurrent ones of the same script and keys (see :class:`Merge`)."""
        head = self._call_head(name, keys)
        call = (*head, *args)
        if merge is not None:
            merge = merge.after(len(head))
        try:
            command = Command(role, call, idempotent=idempotent, merge=merge,
                              head=head if keys is self._life_keys else None)
            return (yield from self._send(command, idempotent=idempotent))
        except NoScriptError:
            load = ("SCRIPT", "LOAD", self._scripts[name].text)
            if self._quorum_cluster:  # to the node the call goes to (the asyncio Cluster
                yield Pipeline(role, [load], owner_of=keys[0])  # client cannot route it)
            else:
                yield from self._send(Command(role, load, idempotent=True), idempotent=True)
            return (yield from self._send(Command(role, call, idempotent=idempotent),
                                          idempotent=idempotent))

    def _script_once(self, operation: str, key: str, name: str, keys: list[str],
                     args: list[Any], merge: Merge | None) -> Op[Any]:
        """``guarded(operation, key, _script(QUORUM, name, ...))`` of an idempotent write, in
        one generator instead of three (a one-message push or ack runs through here: each
        layer costs every call): the command goes out from here, and a failure is handed to
        that general path at the same point, so it does what it would have done (the script's
        text after NOSCRIPT, Dynomite's retries, typed errors)."""
        head = self._call_head(name, keys)
        try:
            return (yield Command(QUORUM, (*head, *args),
                                  merge=None if merge is None else merge.after(len(head)),
                                  head=head if keys is self._life_keys else None))
        except GeneratorExit:
            raise
        except BaseException as exc:
            general = guarded(operation, key, self._script(QUORUM, name, keys, args,
                                                           idempotent=True, merge=merge))
            general.send(None)  # to its first request: the command that just failed
            return (yield from _thrown_into(general, exc))

    def _read_script(self, name: str, keys: list[str], args: list[Any]) -> Op[Any]:
        """A read-only script on the read connection. On a Cluster that reads from replicas it
        runs as ``EVALSHA_RO`` on a replica of the slot (redis-py would send EVALSHA to the
        primary); a lost replica or a stale slot map reads once through the client's own
        routing, and a server without ``EVALSHA_RO`` (Redis < 7) reads on the primary."""
        if self._replica_reads and self._ro_supported:
            script = self._scripts[name]
            tail = (len(keys), *keys, *args)
            try:
                try:
                    return (yield Command(READ, ("EVALSHA_RO", script.sha, *tail), keys[0]))
                except NoScriptError:
                    return (yield Command(READ, ("EVAL_RO", script.text, *tail), keys[0]))
            except _NODE_LOST:
                yield RefreshSlots(READ)
            except ResponseError as exc:
                if "unknown command" not in str(exc).lower():
                    raise
                self._ro_supported = False
        return (yield from self._script(READ, name, keys, args, idempotent=True))

    def _write(self, operation: str, script_name: str, calls: list[tuple[list[str], list[Any]]],
               *, replicate: bool = True, merge: Merge | None = None) -> Op[list[Any]]:
        """Run a write script once per (keys, args), pipelined, then WAIT for the write quorum.

        Claims and unack re-queues pass ``replicate=False``: losing one of them in a failover
        can only cause a redelivery, never a lost message, so they do not pay for WAIT. Every
        write script run here is idempotent (repeating it with the same arguments changes
        nothing more), so Dynomite's error replies are retried (see :meth:`_send`).

        Raises:
            QuorumNotReachedError: fewer replicas than ``write_quorum`` confirmed in time.
            RedisOperationError: Redis failed.
        """
        key = calls[0][0][0]
        quorum = self.settings.write_quorum if replicate else 0
        if quorum == 0 and len(calls) == 1:
            keys, args = calls[0]
            if not self.detached and self._first_checks_done():
                return [(yield from self._script_once(operation, key, script_name, keys, args,
                                                      merge))]
            return [(yield from self._guard(operation, key, self._script(
                QUORUM, script_name, keys, args, idempotent=True, merge=merge)))]
        script = self._scripts[script_name]
        commands: list[Sequence[Any]] = [self._call(script_name, keys, args)
                                         for keys, args in calls]
        if quorum:
            commands.append(("WAIT", quorum, self.settings.write_quorum_timeout_ms))
        results = yield from self._guard(operation, key,
                                         self._pipelined(key, commands, script.text))
        if quorum:
            acknowledged = int(results.pop())
            if acknowledged < quorum:
                raise QuorumNotReachedError(operation, key, acknowledged, quorum)
        return list(results)

    def _pipelined(self, key: str, commands: list[Sequence[Any]], text: str) -> Op[list[Any]]:
        """Send ``commands`` in one round trip; a server that lacks the script (a failover moved
        the connection to one that never loaded it) gets ``SCRIPT LOAD`` in front and the
        pipeline again: every EVALSHA of it failed, so nothing ran twice."""
        try:
            return (yield from self._on_owner(key, commands))
        except NoScriptError:
            results = yield from self._on_owner(key, [("SCRIPT", "LOAD", text), *commands])
            return list(results[1:])

    def _on_owner(self, key: str, commands: list[Sequence[Any]]) -> Op[list[Any]]:
        """Pipeline on the quorum client; on a Cluster, on the primary that owns ``key``'s slot,
        so a write and its WAIT reach one node. That bypasses the client's own routing, so
        this does what the routing would after a failover or resharding: re-read the slot map
        and try again."""
        replies: list[Any]
        if not self._quorum_cluster:
            replies = yield from self._send(Pipeline(QUORUM, commands), idempotent=True)
            return replies
        for attempt, pause_s in enumerate((*CLUSTER_RETRY_PAUSES_S, None)):
            try:
                replies = yield Pipeline(QUORUM, commands, owner_of=key)
                return replies
            except _NODE_LOST as exc:
                if pause_s is None:
                    raise
                log.info("cluster write for %s failed (%s); re-reading the slot map, retry %d",
                         key, exc, attempt + 1)
                yield Sleep(pause_s)
                yield RefreshSlots(QUORUM)
        raise AssertionError("unreachable")  # pragma: no cover


def _ids_pushed(batch: list[Message], flags: list[bool]) -> list[str]:
    """The ids of ``batch`` whose flag says pushed, in input order."""
    return [m.id for m, pushed in zip(batch, flags, strict=True) if pushed]


def _thrown_into(op: Op[Any], error: BaseException) -> Op[Any]:
    """Run ``op`` (started, waiting at a request) on from there, as ``yield from`` would,
    with ``error`` raised at that request first."""
    try:
        request = op.throw(error)
        while True:
            try:
                reply = yield request
            except GeneratorExit:
                op.close()
                raise
            except BaseException as exc:  # thrown in by the driver: op's to handle
                request = op.throw(exc)
            else:
                request = op.send(reply)
    except StopIteration as done:
        return done.value


class _Claim:
    """What one pop has leased so far (by id: a message the reprocessor put back while this pop
    waited and that it claimed again is returned once), and its parameters."""

    __slots__ = ("count", "held", "lease_ms", "order")

    def __init__(self, order: list[int], count: int, lease_ms: int) -> None:
        self.order = order
        self.count = count
        self.lease_ms = lease_ms
        self.held: dict[str, tuple[Message, int]] = {}

    def take(self, result: Any, shard: str, lease_ms: int,
             lateness: bool = True) -> tuple[int, list[str], list[int]]:
        """Record a claim reply; return how many it leased, the ids that do not decode, and
        the lateness of each leased one (claim time - due ms, from the reply: no I/O; only
        when ``lateness``, else [])."""
        now = int(result[0])
        lease_until = now + lease_ms
        stamp = f":{now}"
        held = self.held
        from_json = Message.from_json
        undecodable: list[str] = []
        late: list[int] = []
        got = 0
        # One loop per message of a 500-message reply: the delivery count and the receipt
        # (deliveries:claim ms, as claim.lua stores it) are set here, not through a helper call.
        for i in range(3, len(result), 4):  # id, json, deliveries, due ms
            try:
                message = from_json(result[i + 1], shard)
            except InvalidMessageError:
                undecodable.append(as_text(result[i]))
                continue
            deliveries = int(result[i + 2])
            message.deliveries = deliveries
            message.receipt = f"{deliveries}{stamp}"
            held[message.id] = (message, lease_until)
            got += 1
            if lateness:
                late.append(max(0, now - int(float(result[i + 3]))))  # see claim.lua
        return got, undecodable, late

    def messages(self) -> list[Message]:
        return [m for m, _ in self.held.values()]


def _leased(raw: Any, shard: str, deliveries: int, claimed_ms: int) -> Message:
    """A claimed message with its delivery count and lease receipt, ``deliveries:claim ms``
    (the form ``receipt_of`` in ``scripts/_prelude.lua`` compares with)."""
    message = Message.from_json(raw, shard=shard)
    message.deliveries = deliveries
    message.receipt = f"{deliveries}:{claimed_ms}"
    return message


def _id_receipt_pairs(operation: str, ids: Iterable[str | Message]) -> list[str]:
    """[id, receipt, id, receipt, ...]: Message objects bring their receipt, ids none."""
    items = validate.listed(f"{operation} takes a list of ids, not a single id", ids,
                            single=(Message,))
    pairs: list[str] = []
    add = pairs.append
    # The usual item, a popped message or an id of ASCII text, needs none of the checks that
    # name what is wrong (a call per id and receipt: ~1/4 of a batched consumer's own CPU).
    for item in items:
        if isinstance(item, Message):
            id_, receipt = item.id, item.receipt
            if not (type(id_) is str and id_ and id_.isascii() and (receipt is None or (
                    type(receipt) is str and receipt and receipt.isascii()))):
                id_, receipt = validate.message_id(id_), _receipt(receipt)
            add(id_)
            add(receipt or "")
        else:
            add(item if type(item) is str and item and item.isascii()
                else validate.message_id(item))
            add("")
    return pairs


#: The event kind that carries one delivery's lateness in ms as its count.
LATE = "late_ms"


def no_events(queue: str, kind: str, count: int) -> None:
    """The default of :attr:`QueueCore.events`: nothing is observed."""


def _opt(value: int | None) -> int | str:
    return "" if value is None else value


def _receipt(receipt: object) -> str:
    if receipt is None:
        return ""
    return validate.text("receipt", receipt, empty=False)


def _decoded(raw: Any, shard: str | None) -> Message | None:
    if not raw:
        return None
    try:
        return Message.from_json(raw, shard=shard)
    except InvalidMessageError:
        return None


def _hscan_page(reply: Any) -> tuple[int, list[tuple[Any, Any]]]:
    """(next cursor, [(field, value), ...]) of an HSCAN reply, parsed by redis-py (a dict) or
    not (a flat list)."""
    cursor, body = reply[0], reply[1]
    if isinstance(body, dict):
        return int(cursor), list(body.items())
    return int(cursor), list(zip(body[::2], body[1::2], strict=True))


def _int_or_none(value: Any) -> int | None:
    if value is None or value == "" or value == b"":
        return None
    return int(float(value))


def _max_deliveries(own: Any, stored: int) -> int | None:
    """A message's own max deliveries, else the queue's stored policy's (None: unlimited)."""
    if own is not None:
        return int(own)
    return stored or None
