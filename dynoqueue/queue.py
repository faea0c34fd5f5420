"""DynoQueue: one named queue spread over all shards, with the dyno-queues operations.

Every state change is one Lua script (``dynoqueue/scripts``) run on the quorum connection, so a
crash between two round trips can never leave a half-moved message. Cheap reads (peek, size,
shard sizes, local_get, scans) go to the non-quorum connection, usually the local zone's replica.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any, TypeVar

from redis.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import (
    NoScriptError,
    RedisClusterException,
    RedisError,
    ResponseError,
)
from redis.exceptions import TimeoutError as RedisTimeoutError

from . import scripts
from .doorbell import Doorbell
from .errors import (
    ConfigurationError,
    InvalidArgumentError,
    InvalidMessageError,
    InvalidPatternError,
    QueueClosedError,
    QuorumNotReachedError,
    RedisOperationError,
)
from .keys import QueueKeys
from .message import Message, as_text
from .sharding import ShardingStrategy

log = logging.getLogger("dynoqueue.queue")

T = TypeVar("T")

#: Most messages one script call pushes, claims or re-queues: bounds how long Redis is blocked.
SCRIPT_BATCH = 500
#: How many of a shard's earliest ids find_stale_messages checks.
STALE_CHECK_LIMIT = 1000
#: Waiting pops re-check this often when the doorbell subscription is down.
_FALLBACK_POLL_S = 0.05
# Pauses between attempts of a pipelined cluster write after a failover (MOVED, connection
# lost): ~7 s in all, longer than a replica takes over with cluster-node-timeout up to ~5 s.
_CLUSTER_RETRY_PAUSES_S = (0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.0, 1.0)
_SET_TIMEOUT_ATTEMPTS = 5


class DynoQueue:
    """One named queue over all shards. Mirrors dyno-queues' ``DynoQueue`` / ``RedisDynoQueue``.

    Get instances from :meth:`dynoqueue.RedisQueues.get`, which wires the connections, shards
    and settings; the constructor is not part of the stable API.

    Thread-safe: one instance may be shared by producer and consumer threads.

    Attributes:
        name: the queue name.
        unack_timeout_ms: the lease a pop takes on each message, in milliseconds.
        shards: all shard names. ``local_shard``: the shard pops and peeks act on.
    """

    def __init__(
        self,
        name: str,
        *,
        quorum_conn: Any,
        non_quorum_conn: Any,
        key_prefix: str,
        shards: Sequence[str],
        local_shard: str,
        sharding_strategy: ShardingStrategy,
        unack_timeout_ms: int,
        write_quorum: int,
        write_quorum_timeout_ms: int,
        clock: Callable[[], int] | None,
        max_payload_bytes: int,
        poll_interval_ms: int,
        hash_tag: bool = False,
        doorbell: bool = True,
    ) -> None:
        self.keys = QueueKeys(key_prefix, name, tuple(shards), hash_tag)
        if local_shard not in self.keys.shards:
            raise ConfigurationError(f"local shard {local_shard!r} is not one of {list(shards)}")
        self.name = name
        self.unack_timeout_ms = unack_timeout_ms
        self.shards = list(self.keys.shards)
        self.local_shard = local_shard
        self._local = self.shards.index(local_shard)
        self._local_first = [self._local] + [
            i for i in range(len(self.shards)) if i != self._local
        ]
        self._quorum = quorum_conn
        self._non_quorum = non_quorum_conn
        self._strategy = sharding_strategy
        self._write_quorum = write_quorum
        self._write_quorum_timeout_ms = write_quorum_timeout_ms
        self._clock = clock
        self._max_payload_bytes = max_payload_bytes
        self._poll_interval_s = poll_interval_ms / 1000
        self._write_scripts = scripts.register(quorum_conn, scripts.WRITE_SCRIPTS, doorbell)
        self._read_scripts = scripts.register_read(non_quorum_conn, scripts.READ_SCRIPTS)
        self._doorbell_enabled = doorbell
        self._doorbell: Doorbell | None = None
        self._doorbell_lock = threading.Lock()
        self._closed = False

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    def __repr__(self) -> str:
        return f"DynoQueue({self.name!r}, shards={self.shards}, local={self.local_shard!r})"

    # ----------------------------------------------------------------------------- producing

    def push(self, messages: Iterable[Message]) -> list[str]:
        """Store messages and make each wait in the shard the sharding strategy picks.

        Each message becomes visible ``message.timeout`` ms after the push; all messages of one
        call share one "now" (the Redis server's clock unless a clock was injected). Pushing an
        id that already exists replaces its payload and moves it: it then waits in exactly one
        shard, and is no longer leased if it was. Mirrors ``push``.

        Args:
            messages: the messages (a list, tuple or other iterable of :class:`Message`).

        Returns:
            The ids, in input order.

        Raises:
            InvalidMessageError: (a ValueError) an element is not a valid Message, or its payload
                is over ``max_payload_bytes`` (PayloadTooLargeError). Nothing of the batch is
                written.
            ConfigurationError: the sharding strategy returned an unknown shard; nothing written.
            QuorumNotReachedError: fewer replicas than ``write_quorum`` confirmed in time; the
                messages are stored on the primary (retrying with the same ids is safe).
            RedisOperationError: Redis failed. A batch larger than SCRIPT_BATCH may then be
                partly stored; pushing it again is safe.
        """
        batch = self._validated(messages)
        if not batch:
            return []
        self._check_open()
        args: list[Any] = []
        for message in batch:
            shard = self._strategy.get_next_shard(self.shards, message)
            if shard not in self.shards:
                raise ConfigurationError(
                    f"sharding strategy chose shard {shard!r}, not one of {self.shards}"
                )
            args += [message.id, message.to_json(), message.timeout, message.priority,
                     self.shards.index(shard) + 1]
        keys = self.keys.all_keys()
        head = [str(len(self.shards))]
        per = 5
        chunks = [args[i:i + SCRIPT_BATCH * per] for i in range(0, len(args), SCRIPT_BATCH * per)]
        if len(chunks) == 1:
            self._write_many("push", "push", [(keys, [self._now_arg(), *head, *chunks[0]])])
        else:
            # The first chunk fixes "now" for the whole batch; the rest reuse it.
            (now,) = self._write_many(
                "push", "push", [(keys, [self._now_arg(), *head, *chunks[0]])], replicate=False
            )
            rest = [(keys, [str(now), *head, *chunk]) for chunk in chunks[1:]]
            self._write_many("push", "push", rest)
        return [m.id for m in batch]

    def ensure(self, message: Message) -> bool:
        """Push ``message`` only if its id is neither waiting nor leased, atomically.

        Mirrors ``ensure`` (which was a non-atomic check-then-push in dyno-queues).

        Returns:
            True if pushed, False if the id was already present (nothing changed).

        Raises:
            InvalidMessageError, ConfigurationError, QuorumNotReachedError, RedisOperationError:
                as for :meth:`push`.
        """
        (message,) = self._validated([message])
        self._check_open()
        shard = self._strategy.get_next_shard(self.shards, message)
        if shard not in self.shards:
            raise ConfigurationError(f"sharding strategy chose unknown shard {shard!r}")
        args = [self._now_arg(), str(len(self.shards)), message.id, message.to_json(),
                message.timeout, message.priority, self.shards.index(shard) + 1]
        (pushed,) = self._write_many("ensure", "ensure", [(self.keys.all_keys(), args)])
        return bool(pushed)

    # ----------------------------------------------------------------------------- consuming

    def pop(self, count: int, wait_ms: int = 0) -> list[Message]:
        """Lease up to ``count`` due messages from the local shard, oldest visibility first.

        Each returned message is moved to the unack set with a lease of ``unack_timeout_ms``;
        ack it within the lease, extend it with :meth:`set_unack_timeout`, or it is delivered
        again once the unack reprocessor runs (at-least-once). The claim is one script that
        re-checks visibility, so a message is never returned early nor to two consumers while
        its lease holds. Returns early once ``count`` messages are leased; messages that arrive
        or fall due while waiting are included. Waiting sends no commands except when a
        doorbell rings, a message falls due, or every ``poll_interval_ms``. Mirrors ``pop``.

        Args:
            count: most messages to return, >= 0 (0 returns [] at once).
            wait_ms: longest wait in milliseconds for the first ``count`` messages, >= 0. Keep
                it well below ``unack_timeout_ms``: the leases of messages claimed early in a
                long wait run while the pop still waits.

        Returns:
            The leased messages, each with ``shard`` set; [] if none was due in time.

        Raises:
            InvalidArgumentError: count or wait_ms is not an int >= 0.
            QueueClosedError: the queue was closed.
            RedisOperationError: Redis failed.
        """
        return self._pop("pop", [self._local], count, wait_ms)

    def bulk_pop(self, count: int, wait_ms: int = 0) -> list[Message]:
        """Same as :meth:`pop` (every pop claims in batches in one script). Mirrors ``bulkPop``."""
        return self._pop("bulk_pop", [self._local], count, wait_ms)

    def unsafe_pop_all_shards(self, count: int, wait_ms: int = 0) -> list[Message]:
        """Like :meth:`pop`, over every shard: the local one first, then the others in order.

        "Unsafe" as in dyno-queues: it takes work queued for other zones. The leases live in
        each message's own shard, so the unack reprocessor of that shard's zone puts back
        what is not acked. Mirrors ``unsafePopAllShards``.
        """
        return self._pop("unsafe_pop_all_shards", self._local_first, count, wait_ms)

    def unsafe_bulk_pop(self, count: int, wait_ms: int = 0) -> list[Message]:
        """Same as :meth:`unsafe_pop_all_shards`. Mirrors ``unsafeBulkPop``."""
        return self._pop("unsafe_bulk_pop", self._local_first, count, wait_ms)

    def pop_with_msg_id(self, id: str) -> Message | None:
        """Lease one message by id if it waits in the local shard and is due.

        Mirrors ``popWithMsgId``, but respects the visibility time (dyno-queues did not).

        Returns:
            The leased message, or None if it is not waiting locally or not yet due.

        Raises:
            InvalidArgumentError: id is not a non-empty str.
            RedisOperationError: Redis failed.
        """
        return self._claim_id("pop_with_msg_id", id, [self._local])

    def unsafe_pop_with_msg_id_all_shards(self, id: str) -> Message | None:
        """Like :meth:`pop_with_msg_id`, searching every shard (local first).

        Mirrors ``unsafePopWithMsgIdAllShards``.
        """
        return self._claim_id(
            "unsafe_pop_with_msg_id_all_shards", id, self._local_first
        )

    def pop_msg_with_predicate(self, pattern: str, local_only: bool = False) -> Message | None:
        """Lease the earliest due message whose stored JSON matches a Lua pattern.

        Mirrors ``popMsgWithPredicate``, except that the returned message carries its real
        payload (dyno-queues returned the whole stored JSON as payload). Scans due messages:
        meant for administration, not the hot path.

        Args:
            pattern: a Lua pattern (``string.match``) matched against the message JSON,
                e.g. ``'"payload":"order%-42"'``.
            local_only: search only the local shard instead of all shards.

        Returns:
            The leased message, or None if no due message matches.

        Raises:
            InvalidPatternError: (a ValueError) the pattern is empty or malformed.
            RedisOperationError: Redis failed.
        """
        self._check_pattern(pattern)
        self._check_open()
        order = [self._local] if local_only else self._local_first
        keys = self._claim_keys(order)
        result = self._write_many(
            "pop_msg_with_predicate", "claim_match",
            [(keys, [self._now_arg(), pattern, self.unack_timeout_ms])], replicate=False,
        )[0]
        return self._claimed_one(result, order)

    def ack(self, id: str) -> bool:
        """End the lease of a popped message and delete it. Mirrors ``ack``.

        Returns:
            True if the message was leased and is now gone; False if it was not leased (never
            popped, already acked or removed, or put back after its lease expired).

        Raises:
            InvalidArgumentError: id is not a non-empty str.
            QuorumNotReachedError, RedisOperationError: as for :meth:`push`.
        """
        return self.ack_many([self._check_id(id)]) == 1

    def ack_many(self, ids: Iterable[str | Message]) -> int:
        """Ack many messages in as few round trips as possible. Mirrors ``ack(List<Message>)``.

        Args:
            ids: message ids, or Message objects.

        Returns:
            How many were leased and are now gone.

        Raises:
            InvalidArgumentError: an element is not a non-empty str or a Message; nothing acked.
            QuorumNotReachedError, RedisOperationError: as for :meth:`push`.
        """
        if isinstance(ids, (str, bytes, Message)):
            raise InvalidArgumentError("ack_many takes a list of ids, not a single id")
        checked = [m.id if isinstance(m, Message) else self._check_id(m) for m in ids]
        if not checked:
            return 0
        self._check_open()
        keys = [self.keys.message_hash, *self.keys.all_unack_shards]
        calls = [(keys, checked[i:i + SCRIPT_BATCH]) for i in range(0, len(checked), SCRIPT_BATCH)]
        return sum(int(n) for n in self._write_many("ack", "ack", calls))

    def set_unack_timeout(self, id: str, timeout_ms: int) -> bool:
        """Set a leased message's lease to expire ``timeout_ms`` from now (extend or shorten).

        0 makes it eligible for the next unack processing run. Mirrors ``setUnackTimeout``.

        Returns:
            True if the message is leased (and its lease was set), else False.

        Raises:
            InvalidArgumentError: bad id, or timeout_ms not an int >= 0.
            QuorumNotReachedError, RedisOperationError: as for :meth:`push`.
        """
        return self._set_lease("set_unack_timeout", id, timeout_ms, only_if_shorter=False)

    def set_unack_timeout_if_shorter(self, id: str, timeout_ms: int) -> bool:
        """Like :meth:`set_unack_timeout`, but only if that brings the expiry earlier.

        Mirrors Conductor's ``setUnackTimeoutIfShorter``.

        Returns:
            True if the lease was shortened; False if not leased or not shortened.
        """
        return self._set_lease(
            "set_unack_timeout_if_shorter", id, timeout_ms, only_if_shorter=True
        )

    def set_timeout(self, id: str, timeout_ms: int) -> bool:
        """Make a waiting message due ``timeout_ms`` from now, keeping its priority.

        Also records the new delay in the stored message. A leased message is not changed.
        Mirrors ``setTimeout`` (without its bug of dropping the priority fraction).

        Returns:
            True if the message was waiting and was updated, else False.

        Raises:
            InvalidArgumentError: bad id, or timeout_ms not an int >= 0.
            QuorumNotReachedError, RedisOperationError: as for :meth:`push`.
        """
        self._check_id(id)
        self._check_ms("timeout_ms", timeout_ms)
        self._check_open()
        keys = [self.keys.message_hash, *self.keys.all_queue_shards]
        for _ in range(_SET_TIMEOUT_ATTEMPTS):
            raw = self._call(
                "set_timeout", self.keys.message_hash,
                lambda: self._quorum.hget(self.keys.message_hash, id),
            )
            if raw is None:
                return False
            old = Message.from_json(raw)
            old.timeout = timeout_ms
            args = [self._now_arg(), id, timeout_ms, old.priority, raw, old.to_json()]
            (status,) = self._write_many("set_timeout", "set_timeout", [(keys, args)])
            if int(status) >= 0:
                return int(status) == 1
        raise RedisOperationError(
            "set_timeout", self.keys.message_hash,
            f"message {id!r} kept changing during {_SET_TIMEOUT_ATTEMPTS} attempts",
        )

    def remove(self, id: str) -> bool:
        """Delete a message wherever it is, waiting or leased, with its payload.

        One script, so it is also :meth:`atomic_remove`. Mirrors ``remove`` (fixing its leak of
        leased messages' payloads).

        Returns:
            True if anything was removed, False if the id was unknown.

        Raises:
            InvalidArgumentError: id is not a non-empty str.
            QuorumNotReachedError, RedisOperationError: as for :meth:`push`.
        """
        self._check_id(id)
        self._check_open()
        (removed,) = self._write_many(
            "remove", "remove", [(self.keys.all_keys(), [id])]
        )
        return bool(removed)

    def atomic_remove(self, id: str) -> bool:
        """Same as :meth:`remove`. Mirrors ``atomicRemove``."""
        return self.remove(id)

    # ----------------------------------------------------------------------------- reading

    def peek(self, count: int) -> list[Message]:
        """Read up to ``count`` due messages of the local shard without leasing them.

        Reads through the non-quorum connection (a replica may lag behind the primary).
        Mirrors ``peek``.

        Returns:
            Due messages in visibility order, each with ``shard`` set.

        Raises:
            InvalidArgumentError: count is not an int >= 0.
            RedisOperationError: Redis failed.
        """
        return self._peek("peek", [self._local], count)

    def unsafe_peek_all_shards(self, count: int) -> list[Message]:
        """Like :meth:`peek` over every shard (local first); never more than ``count``.

        Mirrors ``unsafePeekAllShards`` (which could return more than asked).
        """
        return self._peek("unsafe_peek_all_shards", self._local_first, count)

    def contains(self, id: str) -> bool:
        """Whether a message is stored (waiting or leased), read on the quorum connection.

        Returns:
            True if the id is in the queue.

        Raises:
            InvalidArgumentError, RedisOperationError.
        """
        self._check_id(id)
        return bool(self._call(
            "contains", self.keys.message_hash,
            lambda: self._quorum.hexists(self.keys.message_hash, id),
        ))

    def get(self, id: str) -> Message | None:
        """The stored message (waiting or leased), read on the quorum connection. Mirrors ``get``.

        Returns:
            The message, or None if absent.

        Raises:
            InvalidArgumentError, RedisOperationError.
        """
        return self._get("get", self._quorum, id)

    def local_get(self, id: str) -> Message | None:
        """Like :meth:`get`, read on the non-quorum (local replica) connection.

        Mirrors ``localGet``.
        """
        return self._get("local_get", self._non_quorum, id)

    def get_all_messages(self) -> list[Message]:
        """Every stored message, waiting or leased, read with HSCAN on the non-quorum connection.

        Mirrors ``getAllMessages``, with real payloads. Best effort while the queue changes.

        Returns:
            The messages, in no particular order.

        Raises:
            RedisOperationError: Redis failed.
        """
        def scan() -> list[Message]:
            out = []
            for _, raw in self._non_quorum.hscan_iter(self.keys.message_hash, count=500):
                out.append(Message.from_json(raw))
            return out
        return self._call("get_all_messages", self.keys.message_hash, scan)

    def contains_predicate(self, pattern: str, local_only: bool = False) -> bool:
        """Whether a stored message's JSON matches a Lua pattern. Mirrors ``containsPredicate``."""
        return self.get_msg_with_predicate(pattern, local_only) is not None

    def get_msg_with_predicate(self, pattern: str, local_only: bool = False) -> str | None:
        """The id of the first stored message whose JSON matches a Lua pattern.

        Scans the whole message hash on the non-quorum connection in the worst case.
        Mirrors ``getMsgWithPredicate``.

        Args:
            pattern: a Lua pattern, as for :meth:`pop_msg_with_predicate`.
            local_only: only messages waiting in the local shard.

        Returns:
            A matching id, or None.

        Raises:
            InvalidPatternError: the pattern is empty or malformed.
            RedisOperationError: Redis failed.
        """
        self._check_pattern(pattern)
        keys = [self.keys.message_hash, self.keys.queue_shard(self.local_shard)]
        script = self._read_scripts["find_match"]
        found = self._call(
            "get_msg_with_predicate", keys[0],
            lambda: script(keys=keys, args=[pattern, "1" if local_only else "0"]),
        )
        return as_text(found) if found else None

    def size(self) -> int:
        """Waiting messages over all shards (leased ones not counted). Mirrors ``size``.

        Reads through the non-quorum connection.
        """
        return sum(s["size"] for s in self.shard_sizes().values())

    def shard_sizes(self) -> dict[str, dict[str, int]]:
        """Per shard: waiting and leased counts. Mirrors ``shardSizes``.

        Returns:
            ``{shard: {"size": waiting, "uacked": leased}}`` (dyno-queues' spelling "uacked").
        """
        def count() -> list[Any]:
            pipe = self._non_quorum.pipeline(transaction=False)
            for shard in self.shards:
                pipe.zcard(self.keys.queue_shard(shard))
                pipe.zcard(self.keys.unack_shard(shard))
            return list(pipe.execute())
        counts = self._call("shard_sizes", self.keys.queue_shard(self.local_shard), count)
        return {
            shard: {"size": int(counts[2 * i]), "uacked": int(counts[2 * i + 1])}
            for i, shard in enumerate(self.shards)
        }

    def find_stale_messages(self) -> list[Message]:
        """Ids waiting in some shard whose payload is gone and that are not leased.

        Checks the earliest STALE_CHECK_LIMIT ids of each shard; reports, never deletes
        (a pop drops such ids by itself). Mirrors ``findStaleMessages``.

        Returns:
            Messages with only ``id`` (and ``shard``) set.
        """
        script = self._read_scripts["find_stale"]
        out: list[Message] = []
        for shard in self.shards:
            keys = [self.keys.message_hash, self.keys.queue_shard(shard),
                    self.keys.unack_shard(shard)]
            ids = self._call("find_stale_messages", keys[1], partial(
                script, keys=keys, args=[STALE_CHECK_LIMIT]))
            out += [Message(as_text(i), shard=shard) for i in ids]
        return out

    # ----------------------------------------------------------------------------- upkeep

    def process_unacks(self) -> int:
        """Put back messages of the local shard whose lease expired, so they are delivered again.

        Each is due at its lease expiry plus its priority fraction (so at once, oldest first).
        Leased ids whose payload is gone are dropped. Runs as many batches as needed. The unack
        reprocessor thread calls this for every queue. Mirrors ``processUnacks`` (which is
        atomic here, so it is also ``atomicProcessUnacks``).

        Returns:
            How many messages were put back.

        Raises:
            RedisOperationError: Redis failed (the reprocessor thread logs it and carries on).
        """
        self._check_open()
        keys = [self.keys.message_hash, self.keys.queue_shard(self.local_shard),
                self.keys.unack_shard(self.local_shard)]
        requeued = stale = 0
        while True:
            (result,) = self._write_many(
                "process_unacks", "requeue_expired",
                [(keys, [self._now_arg(), SCRIPT_BATCH])], replicate=False,
            )
            requeued += int(result[0])
            stale += int(result[1])
            if not int(result[2]):
                break
        if stale:
            log.warning("queue %s shard %s: dropped %d leased ids without payload",
                        self.name, self.local_shard, stale)
        if requeued:
            log.info("queue %s shard %s: %d expired leases put back",
                     self.name, self.local_shard, requeued)
        return requeued

    def atomic_process_unacks(self) -> int:
        """Same as :meth:`process_unacks`. Mirrors ``atomicProcessUnacks``."""
        return self.process_unacks()

    def clear(self) -> None:
        """Delete every message of the queue, waiting or leased, in all shards. Mirrors ``clear``.

        Raises:
            RedisOperationError: Redis failed.
        """
        self._check_open()
        keys = self.keys.all_keys()
        self._call("clear", keys[0], lambda: self._quorum.delete(*keys))

    def close(self) -> None:
        """Stop this queue's doorbell listener; later calls raise QueueClosedError.

        Does not close the Redis connections (the RedisQueues factory's caller owns them).
        Mirrors ``close``.
        """
        self._closed = True
        with self._doorbell_lock:
            if self._doorbell is not None:
                self._doorbell.close()
                self._doorbell = None

    # ----------------------------------------------------------------------------- internals

    def _now_arg(self) -> str:
        return "" if self._clock is None else str(int(self._clock()))

    def _check_open(self) -> None:
        if self._closed:
            raise QueueClosedError(f"queue {self.name!r} is closed")

    def _validated(self, messages: Iterable[Message]) -> list[Message]:
        if isinstance(messages, (Message, str, bytes)) or not isinstance(messages, Iterable):
            raise InvalidMessageError(
                f"push takes a list of Message, got {type(messages).__name__}"
            )
        batch = list(messages)
        for message in batch:
            if not isinstance(message, Message):
                raise InvalidMessageError(
                    f"push takes Message objects, got {type(message).__name__}: {message!r:.80}"
                )
            message.validate(self._max_payload_bytes)
        return batch

    @staticmethod
    def _check_id(id: object) -> str:
        if not isinstance(id, str) or not id:
            raise InvalidArgumentError(f"message id must be a non-empty str, got {id!r}")
        return id

    @staticmethod
    def _check_ms(name: str, value: object) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise InvalidArgumentError(f"{name} must be an int >= 0 (ms), got {value!r}")
        return value

    @staticmethod
    def _check_pattern(pattern: object) -> None:
        if not isinstance(pattern, str) or not pattern:
            raise InvalidPatternError(f"pattern must be a non-empty str, got {pattern!r}")

    def _call(self, operation: str, key: str, fn: Callable[[], T]) -> T:
        """Run ``fn``, turning redis-py errors into typed dynoqueue errors."""
        self._check_open()  # a builder's factory closes its connections with the queues
        try:
            return fn()
        except ResponseError as exc:
            if "BADPATTERN" in str(exc):
                raise InvalidPatternError(f"malformed Lua pattern: {exc}") from exc
            raise RedisOperationError(operation, key, str(exc)) from exc
        except RedisError as exc:
            raise RedisOperationError(operation, key, str(exc)) from exc

    def _write_many(
        self,
        operation: str,
        script_name: str,
        calls: list[tuple[list[str], list[Any]]],
        *,
        replicate: bool = True,
    ) -> list[Any]:
        """Run a write script once per (keys, args), pipelined, then WAIT for the write quorum.

        Claims and unack re-queues pass ``replicate=False``: losing one of them in a failover
        can only cause a redelivery, never a lost message, so they do not pay for WAIT.
        """
        script = self._write_scripts[script_name]
        key = calls[0][0][0]
        quorum = self._write_quorum if replicate else 0

        def run() -> list[Any]:
            if quorum == 0 and len(calls) == 1:
                keys, args = calls[0]
                return [script(keys=keys, args=args)]
            if isinstance(self._quorum, RedisCluster):
                return self._on_slot_owner(key, pipelined)
            return pipelined(self._quorum)

        def pipelined(target: Any) -> list[Any]:
            for attempt in (1, 2):
                pipe = target.pipeline(transaction=False)
                for keys, args in calls:
                    script(keys=keys, args=args, client=pipe)
                if quorum:
                    pipe.execute_command("WAIT", quorum, self._write_quorum_timeout_ms)
                try:
                    results = list(pipe.execute())
                    break
                except NoScriptError:
                    # A failover moved the connection to a server that never loaded the
                    # script (pipelines check before sending). Every call of this one script
                    # failed, so nothing ran: run it again, which loads it first.
                    if attempt == 2:
                        raise
            if quorum:
                acknowledged = int(results.pop())
                if acknowledged < quorum:
                    raise QuorumNotReachedError(operation, key, acknowledged, quorum)
            return results

        return self._call(operation, key, run)

    def _on_slot_owner(self, key: str, run: Callable[[Any], T]) -> T:
        """Run ``run(client)`` on the primary that owns ``key``'s slot, so a write and its WAIT
        reach the same node. This bypasses RedisCluster's own routing, so it does what that
        routing would after a failover or resharding: re-read the slot map and try again."""
        cluster = self._quorum
        for attempt, pause_s in enumerate((*_CLUSTER_RETRY_PAUSES_S, None)):
            node = cluster.get_node_from_key(key)
            try:
                return run(cluster.get_redis_connection(node))
            except (RedisConnectionError, RedisTimeoutError, *scripts.SLOT_MOVED_ERRORS) as exc:
                if pause_s is None:
                    raise
                log.info("cluster write to %s failed (%s); re-reading the slot map, retry %d",
                         node.name, exc, attempt + 1)
                time.sleep(pause_s)
                with contextlib.suppress(RedisError, RedisClusterException):
                    cluster.nodes_manager.initialize()
        raise AssertionError("unreachable")  # pragma: no cover

    def _claim_keys(self, order: list[int]) -> list[str]:
        return [
            self.keys.message_hash,
            *(self.keys.queue_shard(self.shards[i]) for i in order),
            *(self.keys.unack_shard(self.shards[i]) for i in order),
        ]

    def _claimed_one(self, result: Any, order: list[int]) -> Message | None:
        if not result:
            return None
        position, raw = result
        return Message.from_json(raw, shard=self.shards[order[int(position) - 1]])

    def _claim_id(self, operation: str, id: str, order: list[int]) -> Message | None:
        self._check_id(id)
        self._check_open()
        keys = self._claim_keys(order)
        (result,) = self._write_many(
            operation, "claim_id",
            [(keys, [self._now_arg(), id, self.unack_timeout_ms])], replicate=False,
        )
        return self._claimed_one(result, order)

    def _set_lease(
        self, operation: str, id: str, timeout_ms: int, *, only_if_shorter: bool
    ) -> bool:
        self._check_id(id)
        self._check_ms("timeout_ms", timeout_ms)
        self._check_open()
        args = [self._now_arg(), id, timeout_ms, "1" if only_if_shorter else "0"]
        (changed,) = self._write_many(
            operation, "set_unack_timeout", [(self.keys.all_unack_shards, args)]
        )
        return bool(changed)

    def _get(self, operation: str, conn: Any, id: str) -> Message | None:
        self._check_id(id)
        raw = self._call(operation, self.keys.message_hash,
                         lambda: conn.hget(self.keys.message_hash, id))
        return None if raw is None else Message.from_json(raw)

    def _peek(self, operation: str, order: list[int], count: int) -> list[Message]:
        self._check_ms("count", count)
        if count == 0:
            return []
        keys = [self.keys.message_hash, *(self.keys.queue_shard(self.shards[i]) for i in order)]
        script = self._read_scripts["peek"]
        flat = self._call(operation, keys[1],
                          lambda: script(keys=keys, args=[self._now_arg(), count]))
        return [
            Message.from_json(flat[i + 1], shard=self.shards[order[int(flat[i]) - 1]])
            for i in range(0, len(flat), 2)
        ]

    def _claim_once(self, order: list[int], want: int) -> tuple[list[Message], int | None]:
        """Claim up to ``want`` due messages from the shards in ``order``.

        Returns:
            The messages, and the ms until the next waiting message of those shards is due
            (None if they hold none).
        """
        claimed: list[Message] = []
        next_due: int | None = None
        for index in order:
            shard = self.shards[index]
            keys = [self.keys.message_hash, self.keys.queue_shard(shard),
                    self.keys.unack_shard(shard)]
            while len(claimed) < want:
                ask = min(want - len(claimed), SCRIPT_BATCH)
                (result,) = self._write_many(
                    "pop", "claim",
                    [(keys, [self._now_arg(), ask, self.unack_timeout_ms])], replicate=False,
                )
                got = [Message.from_json(raw, shard=shard) for raw in result[2:]]
                claimed += got
                due_in = int(result[1])
                if due_in >= 0:
                    next_due = due_in if next_due is None else min(next_due, due_in)
                if len(got) < ask:
                    break
            if len(claimed) >= want:
                break
        return claimed, next_due

    def _pop(self, operation: str, order: list[int], count: int, wait_ms: int) -> list[Message]:
        self._check_ms("count", count)
        self._check_ms("wait_ms", wait_ms)
        self._check_open()
        if count == 0:
            return []
        if wait_ms == 0:
            return self._claim_once(order, count)[0]
        deadline = time.monotonic() + wait_ms / 1000
        bell = self._ensure_doorbell()
        channels = [self.keys.doorbell(self.shards[i]) for i in order]
        # By id: if this pop waits longer than the lease, the unack reprocessor may put back a
        # message it already holds; claiming it again renews the lease, and it is returned once.
        claimed: dict[str, Message] = {}
        while True:
            ticket = bell.ticket(channels)
            try:
                got, next_due_ms = self._claim_once(order, count - len(claimed))
            except QueueClosedError:  # close() released this waiting pop
                return list(claimed.values())
            for message in got:
                claimed[message.id] = message
            remaining = deadline - time.monotonic()
            if len(claimed) >= count or remaining <= 0 or self._closed:
                return list(claimed.values())
            # A lost subscription polls often; no doorbell at all (Dynomite) polls as configured.
            polling = bell.listening or not bell.enabled
            sleep = min(remaining, self._poll_interval_s if polling else _FALLBACK_POLL_S)
            if next_due_ms is not None:
                sleep = min(sleep, max(next_due_ms, 1) / 1000)
            bell.wait(channels, ticket, sleep)

    def _ensure_doorbell(self) -> Doorbell:
        with self._doorbell_lock:
            self._check_open()
            if self._doorbell is None:
                channels = [self.keys.doorbell(s) for s in self.shards]
                self._doorbell = Doorbell(self._quorum, channels, self._doorbell_enabled)
                if self._doorbell_enabled:
                    # Subscribe before the first claim, or a ring in between would be missed.
                    self._doorbell.wait_until_listening(timeout_s=2.0)
            return self._doorbell

