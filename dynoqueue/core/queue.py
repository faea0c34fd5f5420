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
import re
import time
from collections.abc import Iterable, Sequence
from typing import Any

from redis.exceptions import (
    AskError,
    AuthenticationError,
    AuthenticationWrongNumberOfArgsError,
    ClusterDownError,
    NoPermissionError,
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
    AccessDeniedError,
    ConfigurationError,
    DynomiteError,
    DynomiteQuorumError,
    DynomiteStorageError,
    InvalidArgumentError,
    InvalidMessageError,
    InvalidPatternError,
    QueueClosedError,
    QuorumNotReachedError,
    RedisOperationError,
)
from ..model import validate
from ..model.keys import QueueKeys
from ..model.message import Message, as_text
from ..model.settings import QueueSettings
from .requests import (
    QUORUM,
    READ,
    BellState,
    Cancelled,
    Command,
    Op,
    Pipeline,
    RefreshSlots,
    Request,
    Scan,
    Sleep,
    Ticket,
    WaitBell,
)

log = logging.getLogger("dynoqueue.queue")

#: Most messages one script call pushes, claims or re-queues: bounds how long Redis is blocked.
SCRIPT_BATCH = 500
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
_ACCESS_DENIED = (AuthenticationError, AuthenticationWrongNumberOfArgsError, NoPermissionError)
#: Pauses before repeating an idempotent call that Dynomite answered with its own error (no
#: quorum, a rack's redis unreachable): ~2.5 s in all, a quick redis-server restart plus the
#: second Dynomite waits before it reconnects to it.
DYNOMITE_RETRY_PAUSES_S = (0.05, 0.1, 0.2, 0.4, 0.8, 1.0)
#: Dynomite's own error replies (not a rack's redis'), alone or in redis-py's pipeline message
#: ("... of pipeline caused error: <reply>"; redis.asyncio quotes it as a tuple: "('<reply>',)").
_DYNOMITE_REPLY = re.compile(r"(?:^|caused error: [(\"']*)(Dynomite: Failed to achieve Quorum"
                             r"|Storage: |Peer: )")


def dynomite_error(exc: BaseException) -> type[DynomiteError] | None:
    """The typed error for a Dynomite error reply (None for anything else)."""
    found = _DYNOMITE_REPLY.search(str(exc)) if isinstance(exc, ResponseError) else None
    if found is None:
        return None
    return DynomiteQuorumError if found.group(1).startswith("Dynomite") else DynomiteStorageError


def guarded(operation: str, key: str, op: Op[Any]) -> Op[Any]:
    """Run ``op``, turning redis-py errors into typed dynoqueue errors.

    Raises:
        AccessDeniedError: wrong password, unknown user, missing ACL permission.
        InvalidPatternError: Redis reported a malformed Lua pattern.
        DynomiteError: Dynomite's own error reply (no quorum, storage or peer unreachable).
        RedisOperationError: any other Redis failure, naming ``operation`` and ``key``.
    """
    try:
        return (yield from op)
    except _ACCESS_DENIED as exc:
        raise AccessDeniedError(operation, key, str(exc)) from exc
    except ResponseError as exc:
        if "BADPATTERN" in str(exc):
            raise InvalidPatternError(f"malformed Lua pattern: {exc}") from exc
        raise (dynomite_error(exc) or RedisOperationError)(operation, key, str(exc)) from exc
    except (RedisError, RedisClusterException) as exc:
        raise RedisOperationError(operation, key, str(exc)) from exc


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
                 replica_reads: bool) -> None:
        self.keys = QueueKeys(settings.key_prefix, name, settings.shards, bool(settings.hash_tag))
        self.name = name
        self.settings = settings
        self.shards = list(settings.shards)
        self.local_shard = settings.local_shard
        self.unack_timeout_ms = settings.unack_timeout_ms
        self._local = self.shards.index(self.local_shard)
        self._local_first = [self._local] + [i for i in range(len(self.shards))
                                             if i != self._local]
        self._strategy = settings.strategy
        self._scripts = scripts.load(settings.doorbell)
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

    def __repr__(self) -> str:
        return f"DynoQueue({self.name!r}, shards={self.shards}, local={self.local_shard!r})"

    # ----------------------------------------------------------------------------- producing

    def push(self, messages: Iterable[Message]) -> Op[list[str]]:
        batch = self._validated(messages)
        if not batch:
            return []
        self._check_open()
        args: list[Any] = []
        for message in batch:
            args += [message.id, message.to_json(), message.timeout, message.priority,
                     self._shard_index(message) + 1]
        keys = self.keys.all_keys()
        head = str(len(self.shards))
        step = SCRIPT_BATCH * 5
        chunks = [args[i:i + step] for i in range(0, len(args), step)]
        if len(chunks) == 1:
            yield from self._write("push", "push", [(keys, [self._now_arg(), head, *args])])
        else:
            # The first chunk fixes "now" for the whole batch; the rest reuse it.
            (now,) = yield from self._write(
                "push", "push", [(keys, [self._now_arg(), head, *chunks[0]])], replicate=False)
            rest = [(keys, [str(now), head, *chunk]) for chunk in chunks[1:]]
            yield from self._write("push", "push", rest)
        return [m.id for m in batch]

    def ensure(self, message: Message) -> Op[bool]:
        (message,) = self._validated([message])
        self._check_open()
        args = [self._now_arg(), str(len(self.shards)), message.id, message.to_json(),
                message.timeout, message.priority, self._shard_index(message) + 1]
        (pushed,) = yield from self._write("ensure", "ensure", [(self.keys.all_keys(), args)])
        return bool(pushed)

    # ----------------------------------------------------------------------------- consuming

    def pop(self, operation: str, all_shards: bool, count: int, wait_ms: int
            ) -> Op[list[Message]]:
        """Lease up to ``count`` due messages; wait up to ``wait_ms`` for them (the waiting-pop
        state machine: doorbell tickets, next-due wake-ups, the deadline, re-claims)."""
        validate.int_at_least("count", count, 0)
        validate.ms("wait_ms", wait_ms)
        self._check_open()
        order = self._local_first if all_shards else [self._local]
        if count == 0:
            return []
        if wait_ms == 0:
            claimed: dict[str, tuple[Message, int]] = {}
            yield from self._guarded_claim(operation, order, count, claimed)
            return [m for m, _ in claimed.values()]
        deadline = time.monotonic() + wait_ms / 1000
        channels = [self.bell_channels[i] for i in order]
        # By id: if this pop waits longer than the lease, the unack reprocessor may put back a
        # message it already holds; claiming it again renews the lease, and it is returned once.
        claimed = {}
        while True:
            try:
                bell: BellState = yield Ticket(self, channels)
                next_due_ms = yield from self._guarded_claim(operation, order, count, claimed)
            except QueueClosedError:  # close() released this waiting pop
                return [m for m, _ in claimed.values()]
            remaining = deadline - time.monotonic()
            if len(claimed) >= count or remaining <= 0 or self.closed:
                return [m for m, _ in claimed.values()]
            # Rings wake this pop when the subscription is up; without a doorbell at all
            # (Dynomite) only polling finds new messages. Either way the configured poll
            # interval is the longest sleep; a lost subscription re-checks often instead.
            rings_or_no_bell = bell.listening or not bell.enabled
            sleep = min(remaining, self.settings.poll_interval_ms / 1000
                        if rings_or_no_bell else FALLBACK_POLL_S)
            if next_due_ms is not None:
                sleep = min(sleep, max(next_due_ms, 1) / 1000)
            try:
                yield WaitBell(self, channels, bell.ticket, sleep)
            except Cancelled:
                yield from self._release(claimed)
                raise

    def _guarded_claim(self, operation: str, order: list[int], want: int,
                       claimed: dict[str, tuple[Message, int]]) -> Op[int | None]:
        """Claim into ``claimed`` until it holds ``want``; on cancellation put everything this
        pop leased back (including what a claim in flight leased) before re-raising."""
        try:
            next_due: int | None = yield from self._guard(
                operation, self.keys.queue_shard(self.local_shard),
                self._claim_once(order, want, claimed))
            return next_due
        except Cancelled:
            yield from self._release(claimed)
            raise

    def _claim_once(self, order: list[int], want: int,
                    claimed: dict[str, tuple[Message, int]]) -> Op[int | None]:
        """Claim due messages from the shards in ``order`` until ``claimed`` holds ``want``.

        Returns:
            The ms until the next waiting message of those shards is due (None if none waits).
        """
        next_due: int | None = None
        for index in order:
            shard = self.shards[index]
            keys = [self.keys.message_hash, self.keys.queue_shard(shard),
                    self.keys.unack_shard(shard)]
            while len(claimed) < want:
                ask = min(want - len(claimed), SCRIPT_BATCH)
                try:
                    result = yield from self._script(
                        QUORUM, "claim", keys, [self._now_arg(), ask, self.unack_timeout_ms],
                        idempotent=False)
                except Cancelled as cancelled:  # the claim ran: what it leased is ours to undo
                    if cancelled.late_reply is not None:
                        self._take_claim(cancelled.late_reply, shard, claimed)
                    raise
                got = self._take_claim(result, shard, claimed)
                due_in = int(result[1])
                if due_in >= 0:
                    next_due = due_in if next_due is None else min(next_due, due_in)
                if got < ask:
                    break
            if len(claimed) >= want:
                break
        return next_due

    def _take_claim(self, result: Any, shard: str,
                    claimed: dict[str, tuple[Message, int]]) -> int:
        lease_until = int(result[0]) + self.unack_timeout_ms
        raws = result[2:]
        for raw in raws:
            message = Message.from_json(raw, shard=shard)
            claimed[message.id] = (message, lease_until)
        return len(raws)

    def _release(self, claimed: dict[str, tuple[Message, int]]) -> Op[None]:
        """Put back what a cancelled pop leased (best effort: failing, the leases expire)."""
        by_lease: dict[tuple[str, int], list[str]] = {}
        for message, lease_until in claimed.values():
            by_lease.setdefault((str(message.shard), lease_until), []).append(message.id)
        for (shard, lease_until), ids in by_lease.items():
            keys = [self.keys.message_hash, self.keys.queue_shard(shard),
                    self.keys.unack_shard(shard)]
            try:
                yield from self._script(QUORUM, "release", keys,
                                        [self._now_arg(), lease_until, *ids], idempotent=True)
            except (RedisError, RedisClusterException) as exc:
                log.warning("queue %s: could not put back %d messages of a cancelled pop "
                            "(they return when their lease expires): %s", self.name, len(ids), exc)
        claimed.clear()

    def claim_id(self, operation: str, id: str, all_shards: bool) -> Op[Message | None]:
        validate.message_id(id)
        self._check_open()
        order = self._local_first if all_shards else [self._local]
        result = yield from self._guard(operation, self.keys.message_hash, self._script(
            QUORUM, "claim_id", self._claim_keys(order),
            [self._now_arg(), id, self.unack_timeout_ms], idempotent=False))
        return self._claimed_one(result, order)

    def claim_match(self, pattern: str, local_only: bool) -> Op[Message | None]:
        validate.pattern(pattern)
        self._check_open()
        order = [self._local] if local_only else self._local_first
        result = yield from self._guard("pop_msg_with_predicate", self.keys.message_hash,
                                        self._script(QUORUM, "claim_match", self._claim_keys(order),
                                                     [self._now_arg(), pattern,
                                                      self.unack_timeout_ms], idempotent=False))
        return self._claimed_one(result, order)

    def ack_many(self, ids: Iterable[str | Message]) -> Op[int]:
        if isinstance(ids, (str, bytes, Message)):
            raise InvalidArgumentError("ack_many takes a list of ids, not a single id")
        checked = [m.id if isinstance(m, Message) else validate.message_id(m) for m in ids]
        self._check_attached()
        if not checked:
            return 0
        keys = [self.keys.message_hash, *self.keys.all_unack_shards]
        calls = [(keys, checked[i:i + SCRIPT_BATCH])
                 for i in range(0, len(checked), SCRIPT_BATCH)]
        return sum(int(n) for n in (yield from self._write("ack", "ack", calls)))

    def ack(self, id: str) -> Op[bool]:
        validate.message_id(id)
        return (yield from self.ack_many([id])) == 1

    def set_lease(self, operation: str, id: str, timeout_ms: int, *,
                  only_if_shorter: bool) -> Op[bool]:
        validate.message_id(id)
        validate.ms("timeout_ms", timeout_ms)
        self._check_attached()
        args = [self._now_arg(), id, timeout_ms, "1" if only_if_shorter else "0"]
        (changed,) = yield from self._write(operation, "set_unack_timeout",
                                            [(self.keys.all_unack_shards, args)])
        return bool(changed)

    def set_timeout(self, id: str, timeout_ms: int) -> Op[bool]:
        validate.message_id(id)
        validate.ms("timeout_ms", timeout_ms)
        self._check_attached()
        keys = [self.keys.message_hash, *self.keys.all_queue_shards]
        for _ in range(_SET_TIMEOUT_ATTEMPTS):
            raw = yield from self._guard("set_timeout", keys[0], self._command(
                QUORUM, "HGET", keys[0], id))
            if raw is None:
                return False
            old = Message.from_json(raw)
            old.timeout = timeout_ms
            args = [self._now_arg(), id, timeout_ms, old.priority, raw, old.to_json()]
            (status,) = yield from self._write("set_timeout", "set_timeout", [(keys, args)])
            if int(status) >= 0:
                return int(status) == 1
        raise RedisOperationError(
            "set_timeout", keys[0],
            f"message {id!r} kept changing during {_SET_TIMEOUT_ATTEMPTS} attempts")

    def remove(self, id: str) -> Op[bool]:
        validate.message_id(id)
        self._check_attached()
        (removed,) = yield from self._write("remove", "remove", [(self.keys.all_keys(), [id])])
        return bool(removed)

    # ----------------------------------------------------------------------------- reading

    def peek(self, operation: str, all_shards: bool, count: int) -> Op[list[Message]]:
        validate.int_at_least("count", count, 0)
        self._check_attached()
        if count == 0:
            return []
        order = self._local_first if all_shards else [self._local]
        keys = [self.keys.message_hash, *(self.keys.queue_shard(self.shards[i]) for i in order)]
        flat = yield from self._guard(operation, keys[1], self._read_script(
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
        validate.pattern(pattern)
        self._check_attached()
        keys = [self.keys.message_hash, self.keys.queue_shard(self.local_shard)]
        found = yield from self._guard("get_msg_with_predicate", keys[0], self._read_script(
            "find_match", keys, [pattern, "1" if local_only else "0"]))
        return as_text(found) if found else None

    def contains_match(self, pattern: str, local_only: bool) -> Op[bool]:
        return (yield from self.find_match(pattern, local_only)) is not None

    def size(self) -> Op[int]:
        return sum(s["size"] for s in (yield from self.shard_sizes()).values())

    def shard_sizes(self) -> Op[dict[str, dict[str, int]]]:
        self._check_attached()
        commands: list[Sequence[Any]] = []
        for shard in self.shards:
            commands += [("ZCARD", self.keys.queue_shard(shard)),
                         ("ZCARD", self.keys.unack_shard(shard))]
        key = self.keys.queue_shard(self.local_shard)
        counts = yield from self._guard("shard_sizes", key, self._read_pipeline(key, commands))
        return {shard: {"size": int(counts[2 * i]), "uacked": int(counts[2 * i + 1])}
                for i, shard in enumerate(self.shards)}

    def find_stale_messages(self) -> Op[list[Message]]:
        self._check_attached()
        out: list[Message] = []
        for shard in self.shards:
            keys = [self.keys.message_hash, self.keys.queue_shard(shard),
                    self.keys.unack_shard(shard)]
            ids = yield from self._guard("find_stale_messages", keys[1], self._read_script(
                "find_stale", keys, [STALE_CHECK_LIMIT]))
            out += [Message(as_text(i), shard=shard) for i in ids]
        return out

    # ----------------------------------------------------------------------------- upkeep

    def process_unacks(self) -> Op[int]:
        self._check_attached()
        keys = [self.keys.message_hash, self.keys.queue_shard(self.local_shard),
                self.keys.unack_shard(self.local_shard)]
        requeued = stale = 0
        more = True
        while more:
            requeued_now, stale_now, more = yield from self._requeue_batch(keys)
            requeued += requeued_now
            stale += stale_now
        if stale:
            log.warning("queue %s shard %s: dropped %d leased ids without payload",
                        self.name, self.local_shard, stale)
        if requeued:
            log.info("queue %s shard %s: %d expired leases put back",
                     self.name, self.local_shard, requeued)
        return requeued

    def _requeue_batch(self, keys: list[str]) -> Op[tuple[int, int, bool]]:
        (result,) = yield from self._write(
            "process_unacks", "requeue_expired", [(keys, [self._now_arg(), SCRIPT_BATCH])],
            replicate=False)
        return int(result[0]), int(result[1]), bool(int(result[2]))

    def clear(self) -> Op[None]:
        self._check_open()
        keys = self.keys.all_keys()
        yield from self._guard("clear", keys[0], self._command(QUORUM, "DEL", *keys))

    # ----------------------------------------------------------------------------- checks

    def _now_arg(self) -> str:
        return "" if self._clock is None else str(int(self._clock()))

    def _check_attached(self) -> None:
        if self.detached:
            raise QueueClosedError(f"queue {self.name!r} is closed (its RedisQueues was closed)")

    def _check_open(self) -> None:
        if self.closed or self.detached:
            raise QueueClosedError(f"queue {self.name!r} is closed")

    def _validated(self, messages: Iterable[Message]) -> list[Message]:
        if isinstance(messages, (Message, str, bytes)) or not isinstance(messages, Iterable):
            raise InvalidMessageError(
                f"push takes a list of Message, got {type(messages).__name__}")
        batch = list(messages)
        limit = self.settings.max_payload_bytes
        for message in batch:
            if not isinstance(message, Message):
                raise InvalidMessageError(
                    f"push takes Message objects, got {type(message).__name__}: {message!r:.80}")
            message.validate(limit)
        return batch

    def _shard_index(self, message: Message) -> int:
        shard = self._strategy.get_next_shard(self.shards, message)
        try:
            return self.shards.index(shard)
        except ValueError:
            raise ConfigurationError(
                f"sharding strategy chose shard {shard!r}, not one of {self.shards}") from None

    def _claim_keys(self, order: list[int]) -> list[str]:
        return [self.keys.message_hash,
                *(self.keys.queue_shard(self.shards[i]) for i in order),
                *(self.keys.unack_shard(self.shards[i]) for i in order)]

    def _claimed_one(self, result: Any, order: list[int]) -> Message | None:
        if not result:
            return None
        position, raw = result
        return Message.from_json(raw, shard=self.shards[order[int(position) - 1]])

    # ----------------------------------------------------------------------------- I/O steps

    def _guard(self, operation: str, key: str, op: Op[Any]) -> Op[Any]:
        """Run ``op`` while the factory is open, with typed errors (see :func:`guarded`)."""
        self._check_attached()
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
        script = self._scripts[name]
        head = ("EVAL", script.text) if self.settings.eval_scripts else ("EVALSHA", script.sha)
        return (*head, len(keys), *keys, *args)

    def _script(self, role: str, name: str, keys: list[str], args: list[Any], *,
                idempotent: bool) -> Op[Any]:
        """Run script ``name``; a server that lacks it (restarted, failed over) gets its text."""
        try:
            return (yield from self._send(Command(role, self._call(name, keys, args)),
                                          idempotent=idempotent))
        except NoScriptError:
            text = self._scripts[name].text
            return (yield from self._send(Command(role, ("EVAL", text, len(keys), *keys, *args)),
                                          idempotent=idempotent))

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

    def _read_pipeline(self, key: str, commands: list[Sequence[Any]]) -> Op[list[Any]]:
        replies: list[Any] = []
        if self._replica_reads:  # one by one: each goes to a replica the client picks
            for command in commands:
                replies.append((yield from self._send(Command(READ, command), idempotent=True)))
            return replies
        replies = yield from self._send(Pipeline(READ, commands), idempotent=True)
        return replies

    def _write(self, operation: str, script_name: str, calls: list[tuple[list[str], list[Any]]],
               *, replicate: bool = True) -> Op[list[Any]]:
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
            return [(yield from self._guard(operation, key, self._script(
                QUORUM, script_name, keys, args, idempotent=True)))]
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
